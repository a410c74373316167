package storageguard_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// postgresEnv names the DSN of a PostgreSQL server for the SQL tests; they
// skip PostgreSQL when it is unset.
const postgresEnv = "TERMFENCE_POSTGRES_DSN"

// sqliteDSN is how the tests open a SQLite file: a busy timeout so that
// writers wait for the write lock, WAL so that readers do not block them.
func sqliteDSN(path string) string {
	return "file:" + path + "?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)"
}

func openSQLiteDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", sqliteDSN(path))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// postgresDSN returns the server's DSN with a fresh schema first on the
// search_path, so that each test has its own termfence_fence table. The
// schema is dropped when the test ends.
func postgresDSN(t testing.TB) string {
	t.Helper()
	base := os.Getenv(postgresEnv)
	if base == "" {
		t.Skipf("PostgreSQL tests skipped: set %s to a server's DSN (postgres://user@host:port/db?sslmode=disable) to run them", postgresEnv)
	}
	var b [6]byte
	rand.Read(b[:])
	schema := "tf_" + hex.EncodeToString(b[:])
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec("CREATE SCHEMA " + schema); err != nil {
		t.Fatalf("create schema on %s: %v", postgresEnv, err)
	}
	t.Cleanup(func() {
		db, err := sql.Open("pgx", base)
		if err != nil {
			return
		}
		defer db.Close()
		db.Exec("DROP SCHEMA " + schema + " CASCADE")
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("%s is not a URL: %v", postgresEnv, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func openPostgresDB(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func openSQL(t testing.TB, db *sql.DB, d storageguard.Dialect) *storageguard.SQL {
	t.Helper()
	s, err := storageguard.OpenSQL(context.Background(), db, d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestSQLite(t *testing.T) {
	var path string
	testFence(t, fenceKind{
		open: func(t *testing.T) storageguard.Fence {
			path = filepath.Join(t.TempDir(), "fence.db")
			return openSQL(t, openSQLiteDB(t, path), storageguard.SQLite)
		},
		reopen: func(t *testing.T) storageguard.Fence {
			return openSQL(t, openSQLiteDB(t, path), storageguard.SQLite)
		},
		serialWriters: true,
		goroutines:    8, ops: 40,
	})
	t.Run("Tx", func(t *testing.T) {
		db := openSQLiteDB(t, filepath.Join(t.TempDir(), "fence.db"))
		testSQLTx(t, db, openSQL(t, db, storageguard.SQLite), "?")
	})
}

func TestPostgres(t *testing.T) {
	var dsn string
	testFence(t, fenceKind{
		open: func(t *testing.T) storageguard.Fence {
			dsn = postgresDSN(t)
			return openSQL(t, openPostgresDB(t, dsn), storageguard.Postgres)
		},
		reopen: func(t *testing.T) storageguard.Fence {
			return openSQL(t, openPostgresDB(t, dsn), storageguard.Postgres)
		},
		goroutines: 8, ops: 60,
	})
	t.Run("Tx", func(t *testing.T) {
		db := openPostgresDB(t, postgresDSN(t))
		testSQLTx(t, db, openSQL(t, db, storageguard.Postgres), "$1")
	})
}

// testSQLTx runs testTx over SQL.Tx.
func testSQLTx(t *testing.T, db *sql.DB, s *storageguard.SQL, ph string) {
	ctx := context.Background()
	testTx(t, s, ph, txAPI{
		exec: func(stmt string) error { _, err := db.Exec(stmt); return err },
		read: func() (c string, err error) {
			return c, db.QueryRow("SELECT content FROM files WHERE id = 'f'").Scan(&c)
		},
		tx: func(e epoch.Epoch, then error, stmt string, args ...any) error {
			return s.Tx(ctx, "files/f", e, func(tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, stmt, args...); err != nil {
					return err
				}
				return then
			})
		},
		nilFn: func(e epoch.Epoch) error { return s.Tx(ctx, "files/f", e, nil) },
	})
}

// txAPI is what testTx needs of a database and of a fence's Tx: exec and
// read run outside any fence; tx runs stmt in the fence's transaction under
// e for resource "files/f" and then returns then (nil commits); nilFn calls
// Tx with a nil function.
type txAPI struct {
	exec  func(stmt string) error
	read  func() (string, error)
	tx    func(e epoch.Epoch, then error, stmt string, args ...any) error
	nilFn func(e epoch.Epoch) error
}

// testTx: the application's write and the fence commit together or not at
// all, and a stale epoch's write never commits. ph is the dialect's first
// placeholder.
func testTx(t *testing.T, f storageguard.Fence, ph string, api txAPI) {
	ctx := context.Background()
	for _, stmt := range []string{
		"CREATE TABLE files (id TEXT PRIMARY KEY, content TEXT NOT NULL)",
		"INSERT INTO files VALUES ('f', 'v0')",
	} {
		if err := api.exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	set := func(e epoch.Epoch, content string) error {
		return api.tx(e, nil, "UPDATE files SET content = "+ph+" WHERE id = 'f'", content)
	}
	content := func() string {
		c, err := api.read()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	e33, e34 := ep(33, "node-a"), ep(34, "node-b")
	if err := set(e33, "A0"); err != nil {
		t.Fatal(err)
	}
	if err := set(e34, "B"); err != nil {
		t.Fatal(err)
	}
	if err := set(e33, "A"); !errors.Is(err, storageguard.ErrStale) {
		t.Fatalf("stale Tx = %v", err)
	}
	if c := content(); c != "B" {
		t.Fatalf("content = %q, want B", c)
	}
	// fn fails: its write and the raise to 35 roll back together.
	boom := errors.New("boom")
	if err := api.tx(ep(35, "node-c"), boom, "UPDATE files SET content = 'C' WHERE id = 'f'"); !errors.Is(err, boom) {
		t.Fatalf("Tx = %v, want fn's error", err)
	}
	if c := content(); c != "B" {
		t.Fatalf("content = %q after a failed Tx", c)
	}
	if h, _ := f.Highest(ctx, "files/f"); h != e34 {
		t.Fatalf("Highest = %v after a rolled-back raise, want %v", h, e34)
	}
	if err := api.nilFn(e34); err == nil {
		t.Fatal("Tx with nil fn succeeded")
	}
	huge := epoch.Epoch{Cluster: "payments", Term: math.MaxInt64 + 1, Leader: "x"}
	if err := f.Admit(ctx, "files/f", huge); !errors.Is(err, epoch.ErrMalformed) {
		t.Fatalf("Admit(term 2^63) = %v", err)
	}
}

func TestOpenSQLBadDialect(t *testing.T) {
	db := openSQLiteDB(t, filepath.Join(t.TempDir(), "x.db"))
	if _, err := storageguard.OpenSQL(context.Background(), db, storageguard.Dialect(9)); !errors.Is(err, storageguard.ErrBadDialect) {
		t.Fatalf("OpenSQL(Dialect(9)) = %v", err)
	}
	if _, err := storageguard.OpenSQL(context.Background(), nil, storageguard.SQLite); err == nil {
		t.Fatal("OpenSQL(nil db) succeeded")
	}
}

// TestPostgresSameEpochTxConcurrent: two transactions under one epoch hold
// the fence row FOR SHARE together.
func TestPostgresSameEpochTxConcurrent(t *testing.T) {
	s := openSQL(t, openPostgresDB(t, postgresDSN(t)), storageguard.Postgres)
	testSameEpochTxConcurrent(t, s, func(ctx context.Context, e epoch.Epoch, body func() error) error {
		return s.Tx(ctx, "r", e, func(*sql.Tx) error { return body() })
	})
}

// testSameEpochTxConcurrent admits an epoch for resource "r" and runs two
// transactions under it (tx runs body in one), each waiting inside for the
// other to enter: both must be inside at once.
func testSameEpochTxConcurrent(t *testing.T, f storageguard.Fence, tx func(ctx context.Context, e epoch.Epoch, body func() error) error) {
	ctx := context.Background()
	e := ep(5, "a")
	if err := f.Admit(ctx, "r", e); err != nil {
		t.Fatal(err)
	}
	entered := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := true
			errs[i] = tx(ctx, e, func() error {
				if first {
					close(entered[i])
					first = false
				}
				<-entered[1-i]
				return nil
			})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// txFence presents SQL.Tx as a Fence so that the suite's random-epoch test
// runs over Tx (raise inside the transaction) as well as Do.
type txFence struct{ *storageguard.SQL }

func (f txFence) Do(ctx context.Context, resource string, e epoch.Epoch, write func(context.Context) error) error {
	return f.Tx(ctx, resource, e, func(*sql.Tx) error { return write(ctx) })
}

func TestSQLiteTxConcurrentRandomEpochs(t *testing.T) {
	db := openSQLiteDB(t, filepath.Join(t.TempDir(), "fence.db"))
	testConcurrentRandom(t, txFence{openSQL(t, db, storageguard.SQLite)}, 8, 40)
}

func TestPostgresTxConcurrentRandomEpochs(t *testing.T) {
	db := openPostgresDB(t, postgresDSN(t))
	testConcurrentRandom(t, txFence{openSQL(t, db, storageguard.Postgres)}, 8, 60)
}
