// Package redisserver starts a real redis-server for tests and the example
// cluster: on a free loopback port, with a directory of its own, durable
// (appendonly yes, appendfsync always) unless told otherwise. The binary is
// found through $REDIS_SERVER_BIN, then PATH; Find says where it looked
// when it is missing. CI installs Debian's redis-server (.ci/run).
//
// It is test and demo scaffolding: nothing under storageguard imports it
// outside _test.go files.
package redisserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/termfence/termfence/internal/freeport"
)

// BinEnv names the variable that points at the redis-server binary.
const BinEnv = "REDIS_SERVER_BIN"

// ErrNotInstalled is returned by Find and Start when no redis-server binary
// is found.
var ErrNotInstalled = errors.New("redisserver: redis-server not found")

// Find returns the path of the redis-server binary: $REDIS_SERVER_BIN if
// set, else redis-server on PATH (or /usr/bin, /usr/sbin). The error
// matches ErrNotInstalled and says how to install it.
func Find() (string, error) {
	if p := os.Getenv(BinEnv); p != "" {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
		return "", fmt.Errorf("%w: $%s=%s is not an executable file", ErrNotInstalled, BinEnv, p)
	}
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/bin/redis-server", "/usr/sbin/redis-server"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: not in $%s, not on PATH (install: apt-get install redis-server)", ErrNotInstalled, BinEnv)
}

// Server is one redis-server process, restartable on its address and
// directory.
type Server struct {
	Addr string // "127.0.0.1:port"
	Dir  string // its working directory: the AOF and RDB files
	// Args are the extra configuration arguments it was started with.
	Args []string

	bin  string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	log  *strings.Builder
}

// Durable are the arguments a fence needs: every write synced to the
// append-only file before the reply. Start uses them unless args override
// them (a later "--appendfsync everysec" wins).
var Durable = []string{"--appendonly", "yes", "--appendfsync", "always"}

// Start runs redis-server over dir (created if missing) on a free loopback
// port with Durable and then args (extra "--name value" settings), and
// waits until it answers PING. ctx bounds the start, not the server's
// life: Close stops it.
func Start(ctx context.Context, dir string, args ...string) (*Server, error) {
	bin, err := Find()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("redisserver: %w", err)
	}
	var lastErr error
	// A port picked free can be taken before redis-server binds it; then
	// it exits and another port is tried.
	for try := 0; try < 5; try++ {
		addrs, err := freeport.Addrs(1)
		if err != nil {
			return nil, fmt.Errorf("redisserver: %w", err)
		}
		s := &Server{Addr: addrs[0], Dir: dir, Args: args, bin: bin}
		if lastErr = s.start(ctx); lastErr == nil {
			return s, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func (s *Server) start(ctx context.Context) error {
	_, port, _ := net.SplitHostPort(s.Addr)
	argv := []string{"--port", port, "--bind", "127.0.0.1", "--dir", s.Dir, "--save", "",
		"--daemonize", "no", "--logfile", "", "--enable-debug-command", "yes"}
	argv = append(argv, Durable...)
	argv = append(argv, s.Args...)
	cmd := exec.Command(s.bin, argv...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("redisserver: %w", err)
	}
	cmd.Stderr = cmd.Stdout
	// Its own process group: a signal to the test's group does not reach it
	// first, and Kill ends exactly it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redisserver: start %s: %w", s.bin, err)
	}
	log := &strings.Builder{}
	done := make(chan struct{})
	var logMu sync.Mutex
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			logMu.Lock()
			if log.Len() < 64<<10 {
				log.WriteString(sc.Text() + "\n")
			}
			logMu.Unlock()
		}
		err := cmd.Wait()
		logMu.Lock()
		fmt.Fprintf(log, "(redisserver: exited: %v)\n", err)
		logMu.Unlock()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done, s.log = cmd, done, log
	s.mu.Unlock()
	if err := waitReady(ctx, s.Addr, done); err != nil {
		cmd.Process.Kill()
		<-done
		logMu.Lock()
		defer logMu.Unlock()
		return fmt.Errorf("redisserver: %s did not become ready: %w; its log:\n%s", s.Addr, err, log.String())
	}
	return nil
}

// waitReady waits until the server at addr answers PING with PONG (not
// LOADING), it exits, or ctx ends.
func waitReady(ctx context.Context, addr string, done <-chan struct{}) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if ping(ctx, addr) == nil {
			return nil
		}
		select {
		case <-done:
			return errors.New("it exited")
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func ping(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING: %s", strings.TrimSpace(line))
	}
	return nil
}

// Pid is the running process's ID, or 0.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Done is closed when the current process has exited.
func (s *Server) Done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}

// Kill sends SIGKILL to the server and waits until it has exited: nothing
// it had not written to the kernel survives (what it had written, the
// kernel still holds; a power cut is powerfs's business).
func (s *Server) Kill() error { return s.signal(syscall.SIGKILL) }

// Stop ends the server with SIGTERM (it saves and exits) and waits.
func (s *Server) Stop() error { return s.signal(syscall.SIGTERM) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("redisserver: signal %v: %w", sig, err)
	}
	<-done
	return nil
}

// Restart starts the server again, on the same address and directory,
// after it exited (Kill, Stop, a power cut), and waits until it answers:
// it has then loaded its append-only file.
func (s *Server) Restart(ctx context.Context) error {
	select {
	case <-s.Done():
	default:
		return errors.New("redisserver: Restart: the server is still running")
	}
	var err error
	// The port may be taken by another process for a moment: try again.
	for try := 0; try < 20; try++ {
		if err = s.start(ctx); err == nil || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
	return err
}

// Log is what the current process printed (at most 64 KiB).
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log == nil {
		return ""
	}
	return s.log.String()
}

// Close stops the server (SIGTERM) and waits for it to exit.
func (s *Server) Close() error { return s.Stop() }

// AOFDir is the directory redis-server keeps its append-only files in,
// under its working directory (appenddirname's default).
const AOFDir = "appendonlydir"

// PrepareDir creates dir and dir/AOFDir and syncs both and their parents,
// so that the directory entries survive a power cut: Redis 7.0 creates
// appendonlydir without syncing the directory that holds it, and a power
// cut soon after its first start can lose every file in it.
func PrepareDir(dir string) error {
	aof := dir + "/" + AOFDir
	if err := os.MkdirAll(aof, 0o755); err != nil {
		return fmt.Errorf("redisserver: %w", err)
	}
	for _, d := range []string{aof, dir, dir + "/.."} {
		f, err := os.Open(d)
		if err != nil {
			return fmt.Errorf("redisserver: %w", err)
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return fmt.Errorf("redisserver: sync %s: %w", d, err)
		}
	}
	return nil
}
