// Package pgtest starts a throwaway PostgreSQL server of a test's own, for
// the faults a shared server cannot take: a crash of the whole server (every
// process killed at once, as a power cut or an out-of-memory kill of the
// postmaster's group would), a restart, settings that need a restart
// (wal_level, max_prepared_transactions). It imports testing; import it
// from _test.go files only.
package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"

	"github.com/termfence/termfence/internal/skiptest"
)

// Server is a PostgreSQL server running in a directory of its own,
// removed when the test ends.
type Server struct {
	tb       testing.TB
	bin, dir string
	port     int
	settings []string
	cred     *syscall.Credential
	cmd      *exec.Cmd
	exited   chan struct{}
}

// binDir returns the newest /usr/lib/postgresql/*/bin with initdb, or "".
func binDir() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		a, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		b, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return a < b
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i]
		}
	}
	return ""
}

// Start initialises and starts a server with settings ("name=value", each
// passed as -c), or skips the test when PostgreSQL's binaries are missing
// (.ci/postgres.sh installs them). Run as root, the server runs as the user
// postgres.
func Start(tb testing.TB, settings ...string) *Server {
	tb.Helper()
	bin := binDir()
	if bin == "" {
		skiptest.Skip(tb, "PostgreSQL's binaries (/usr/lib/postgresql/*/bin)",
			"PostgreSQL server tests skipped: no /usr/lib/postgresql/*/bin/initdb (install postgresql, see .ci/postgres.sh)")
	}
	s := &Server{tb: tb, bin: bin, settings: settings}
	dir, err := os.MkdirTemp("", "termfence-pgtest-")
	if err != nil {
		tb.Fatal(err)
	}
	s.dir = dir
	tb.Cleanup(func() {
		s.kill()
		os.RemoveAll(dir)
	})
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			skiptest.Skip(tb, "a postgres user", "PostgreSQL server tests skipped: run as root without a postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			tb.Fatal(err)
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", s.data(), "-A", "trust", "-U", "postgres", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		tb.Fatalf("initdb: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	if err := s.start(); err != nil {
		tb.Fatal(err)
	}
	return s
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

// start runs the postmaster in a process group of its own and waits until
// it answers.
func (s *Server) start() error {
	args := []string{"-D", s.data(), "-p", strconv.Itoa(s.port), "-k", s.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=on", "-c", "max_connections=60"}
	for _, kv := range s.settings {
		args = append(args, "-c", kv)
	}
	log, err := os.OpenFile(filepath.Join(s.dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	s.cmd = cmd
	s.exited = make(chan struct{})
	go func() { cmd.Wait(); close(s.exited) }()
	deadline := time.Now().Add(90 * time.Second)
	for {
		db, err := sql.Open("pgx", s.DSN("postgres"))
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err = db.PingContext(ctx)
			cancel()
			db.Close()
		}
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			s.cmd = nil
			out, _ := os.ReadFile(filepath.Join(s.dir, "log"))
			return fmt.Errorf("%w:\n%s", errExited, out)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres did not answer within 90 s: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// DSN is the DSN of database db as the user postgres.
func (s *Server) DSN(db string) string { return s.DSNAs("postgres", db) }

// DSNAs is the DSN of database db as role.
func (s *Server) DSNAs(role, db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", role, s.port, db)
}

// Crash kills every process of the server at once (SIGKILL to its process
// group): what is in its shared memory and not yet written, WAL included,
// is gone; what it wrote to the kernel stays.
func (s *Server) Crash() {
	s.tb.Helper()
	s.kill()
}

func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	pgid := s.cmd.Process.Pid
	syscall.Kill(-pgid, syscall.SIGKILL)
	<-s.exited
	// The postmaster's children go with the group; wait until none is
	// left, or the next postmaster finds their shared memory in use.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
			break
		}
		syscall.Kill(-pgid, syscall.SIGKILL)
		time.Sleep(10 * time.Millisecond)
	}
	s.cmd = nil
}

// errExited is start's error for a postmaster that exited while starting.
var errExited = errors.New("postgres exited while starting")

// Restart starts the server again after Crash: PostgreSQL recovers from its
// WAL. A postmaster that finds the killed server's shared memory still
// attached (its last processes are still exiting) refuses to start: that
// is retried for up to a minute.
func (s *Server) Restart() {
	s.tb.Helper()
	s.kill()
	deadline := time.Now().Add(time.Minute)
	for {
		err := s.start()
		if err == nil {
			return
		}
		if !errors.Is(err, errExited) || time.Now().After(deadline) {
			s.tb.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Exec runs statements on database db (a session of its own), failing the
// test on error.
func (s *Server) Exec(db, stmts string) {
	s.tb.Helper()
	c, err := sql.Open("pgx", s.DSN(db))
	if err != nil {
		s.tb.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Exec(stmts); err != nil {
		s.tb.Fatalf("%s: %v", stmts, err)
	}
}
