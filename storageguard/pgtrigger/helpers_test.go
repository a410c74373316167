package pgtrigger_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard/internal/sqltest"
	"github.com/termfence/termfence/storageguard/pgtrigger"
)

// key is the tests' HMAC key; otherKey signs forgeries.
var (
	key      = bytes.Repeat([]byte("k"), 32)
	otherKey = bytes.Repeat([]byte("x"), 32)
)

const cluster = "payments"

func ep(term uint64, leader string) epoch.Epoch {
	return epoch.Epoch{Cluster: cluster, Term: term, Leader: leader}
}

// sign returns e's HMAC token under k, a key without an ID.
func sign(t testing.TB, k []byte, e epoch.Epoch) string {
	t.Helper()
	return signKey(t, epoch.HMACKey{Secret: k}, e)
}

// signKey returns e's HMAC token under k ("tf1:hs256.<ID>:…" if k has an
// ID).
func signKey(t testing.TB, k epoch.HMACKey, e epoch.Epoch) string {
	t.Helper()
	c, err := epoch.NewHMACKeys(k)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := c.Sign(e)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// handSign signs text as an hs256 token without validating it, as a
// release without today's checks or a holder of the key could.
func handSign(k []byte, text string) string { return handSignAlg(k, "hs256", text) }

// handSignAlg is handSign with the algorithm field alg ("hs256" or
// "hs256.<key ID>").
func handSignAlg(k []byte, alg, text string) string {
	m := hmac.New(sha256.New, k)
	m.Write([]byte("tf1:" + alg + ":" + text))
	return "tf1:" + alg + ":" + text + ":" + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// db is one test's database: a fresh schema first on the search_path (the
// fence table and the test's tables live there), a private schema of its
// own, a pool, and what psql needs to reach the same schema.
type db struct {
	dsn     string // pgx DSN with search_path
	schema  string // the test's schema
	private string // the guard's private schema
	pool    *pgxpool.Pool
}

// newDB starts a test's database, or skips the test without
// TERMFENCE_POSTGRES_DSN.
func newDB(t testing.TB) *db {
	t.Helper()
	dsn := sqltest.PostgresDSN(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	d := &db{schema: u.Query().Get("search_path"), private: "tfp_" + randHex(6)}
	q := u.Query()
	q.Set("application_name", d.private) // tells this test's sessions apart
	u.RawQuery = q.Encode()
	d.dsn = u.String()
	d.pool = openPool(t, d.dsn)
	t.Cleanup(func() {
		p, err := pgxpool.New(context.Background(), os.Getenv(sqltest.PostgresEnv))
		if err != nil {
			return
		}
		defer p.Close()
		p.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+d.private+" CASCADE")
	})
	return d
}

func openPool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func (d *db) exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := d.pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func (d *db) count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := d.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// config is the tests' usual guard on table for resource "ledger".
func (d *db) config(table string) pgtrigger.Config {
	return pgtrigger.Config{Table: table, Resource: "ledger", Cluster: cluster, HMACKey: key, Schema: d.private}
}

func (d *db) install(t testing.TB, cfg pgtrigger.Config) {
	t.Helper()
	if err := pgtrigger.Install(context.Background(), d.pool, cfg); err != nil {
		t.Fatalf("Install(%+v): %v", cfg, err)
	}
}

// highest reads the fence row of resource.
func (d *db) highest(t testing.TB, resource string) epoch.Epoch {
	t.Helper()
	var h epoch.Epoch
	var term int64
	err := d.pool.QueryRow(context.Background(), "SELECT cluster, term, leader FROM termfence_fence WHERE resource = $1", []byte(resource)).Scan(&h.Cluster, &term, &h.Leader)
	if err != nil {
		t.Fatalf("read fence row %q: %v", resource, err)
	}
	h.Term = uint64(term)
	return h
}

// role creates a login role with no privileges (dropped when the test
// ends), for psql sessions of an ordinary, possibly hostile, user.
func (d *db) role(t testing.TB) string {
	t.Helper()
	r := "tf_role_" + randHex(5)
	d.exec(t, "CREATE ROLE "+r+" LOGIN")
	t.Cleanup(func() {
		p, err := pgxpool.New(context.Background(), os.Getenv(sqltest.PostgresEnv))
		if err != nil {
			return
		}
		defer p.Close()
		ctx := context.Background()
		p.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", r)
		p.Exec(ctx, "DROP OWNED BY "+r+" CASCADE")
		p.Exec(ctx, "DROP ROLE "+r)
	})
	return r
}

// conninfo is the libpq URI for psql: the test's server and database as
// role (empty: the DSN's own user), with the test's schema on the
// search_path.
func (d *db) conninfo(t testing.TB, role string) string {
	t.Helper()
	u, err := url.Parse(d.dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Del("search_path")
	q.Set("options", "-csearch_path="+d.schema)
	u.RawQuery = q.Encode()
	if role != "" {
		u.User = url.User(role)
	}
	return u.String()
}

// psqlBin is the psql client the tests drive, or they skip.
func psqlBin(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("psql")
	if err != nil {
		t.Skip("psql not found on PATH (Debian: apt-get install postgresql-client)")
	}
	return p
}

// psqlResult is what one psql run printed and how it exited.
type psqlResult struct {
	stdout, stderr string
	code           int
}

var sqlstateRE = regexp.MustCompile(`(?m)^(?:psql:[^\n]*?)?ERROR:  ([0-9A-Z]{5}): `)

// states lists the SQLSTATEs of the errors psql reported, in order.
func (r psqlResult) states() []string {
	var s []string
	for _, m := range sqlstateRE.FindAllStringSubmatch(r.stderr, -1) {
		s = append(s, m[1])
	}
	return s
}

// psql runs script with the psql binary as role, stopping at the first
// error (ON_ERROR_STOP) and printing SQLSTATEs (VERBOSITY verbose); vars
// become psql variables (:'name' in the script).
func (d *db) psql(t testing.TB, role, script string, vars ...string) psqlResult {
	t.Helper()
	args := []string{"-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose", "-d", d.conninfo(t, role)}
	for _, v := range vars {
		args = append(args, "-v", v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, psqlBin(t), args...)
	cmd.Stdin = strings.NewReader(script)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := psqlResult{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("psql: %v", err)
	}
	return r
}

// mustPsql runs script and fails the test unless psql succeeded.
func (d *db) mustPsql(t testing.TB, role, script string, vars ...string) string {
	t.Helper()
	r := d.psql(t, role, script, vars...)
	if r.code != 0 {
		t.Fatalf("psql exited %d:\n%s\nstderr:\n%s", r.code, script, r.stderr)
	}
	return r.stdout
}

// refusedWith runs script and fails the test unless psql stopped at an
// error with SQLSTATE code; it returns what psql printed.
func (d *db) refusedWith(t testing.TB, code, role, script string, vars ...string) psqlResult {
	t.Helper()
	r := d.psql(t, role, script, vars...)
	if s := r.states(); r.code != 3 || len(s) != 1 || s[0] != code {
		t.Fatalf("psql exited %d with SQLSTATEs %v, want exit 3 and [%s]:\n%s\nstderr:\n%s", r.code, s, code, script, r.stderr)
	}
	return r
}

// session is a long-lived psql process fed through its standard input, as
// an interactive operator or a batch job holding a connection would be.
// psql goes on after errors (ON_ERROR_STOP off); Run reports the SQLSTATE
// of the last error in what it sent.
type session struct {
	t      testing.TB
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *lockedBuffer
	n      int
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// session starts psql as role; it ends when the test does.
func (d *db) session(t testing.TB, role string) *session {
	t.Helper()
	cmd := exec.Command(psqlBin(t), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=0", "-v", "VERBOSITY=verbose", "-d", d.conninfo(t, role))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &session{t: t, cmd: cmd, stdin: stdin, lines: make(chan string, 64), stderr: &lockedBuffer{}}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(s.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		stdin.Close()
		timer := time.AfterFunc(10*time.Second, func() { cmd.Process.Kill() })
		for range s.lines {
		}
		<-done
		cmd.Wait()
		timer.Stop()
	})
	return s
}

// Send writes script to psql without waiting for it.
func (s *session) Send(script string) {
	s.t.Helper()
	if _, err := io.WriteString(s.stdin, script+"\n"); err != nil {
		s.t.Fatalf("psql stdin: %v", err)
	}
}

// Run sends script and waits (up to a minute) until psql has run it; it
// returns the SQLSTATE of the last error script raised, or "00000", and the
// output lines.
func (s *session) Run(script string) (string, []string) {
	s.t.Helper()
	s.Send("\\set LAST_ERROR_SQLSTATE 00000\n" + script)
	return s.Wait()
}

// Wait waits for what was last sent with Send (or Run) to finish.
func (s *session) Wait() (string, []string) {
	s.t.Helper()
	s.n++
	mark := fmt.Sprintf("__termfence_done_%d__", s.n)
	s.Send("\\echo " + mark + " :LAST_ERROR_SQLSTATE")
	var out []string
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	for {
		select {
		case line, ok := <-s.lines:
			if !ok {
				s.t.Fatalf("psql ended; stderr:\n%s", s.stderr.String())
			}
			if rest, found := strings.CutPrefix(line, mark+" "); found {
				return rest, out
			}
			out = append(out, line)
		case <-deadline.C:
			s.t.Fatalf("psql did not finish within a minute; stderr:\n%s", s.stderr.String())
		}
	}
}
