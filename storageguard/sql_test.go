package storageguard_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/fencetest"
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
	fencetest.Run(t, fencetest.Kind{
		Open: func(t *testing.T) storageguard.Fence {
			path = filepath.Join(t.TempDir(), "fence.db")
			return openSQL(t, openSQLiteDB(t, path), storageguard.SQLite)
		},
		Reopen: func(t *testing.T) storageguard.Fence {
			return openSQL(t, openSQLiteDB(t, path), storageguard.SQLite)
		},
		SerialWriters: true,
		Goroutines:    8, Ops: 40,
	})
	t.Run("Tx", func(t *testing.T) {
		db := openSQLiteDB(t, filepath.Join(t.TempDir(), "fence.db"))
		testSQLTx(t, db, openSQL(t, db, storageguard.SQLite), "?")
	})
}

func TestPostgres(t *testing.T) {
	var dsn string
	fencetest.Run(t, fencetest.Kind{
		Open: func(t *testing.T) storageguard.Fence {
			dsn = postgresDSN(t)
			return openSQL(t, openPostgresDB(t, dsn), storageguard.Postgres)
		},
		Reopen: func(t *testing.T) storageguard.Fence {
			return openSQL(t, openPostgresDB(t, dsn), storageguard.Postgres)
		},
		Goroutines: 8, Ops: 60,
	})
	t.Run("Tx", func(t *testing.T) {
		db := openPostgresDB(t, postgresDSN(t))
		testSQLTx(t, db, openSQL(t, db, storageguard.Postgres), "$1")
	})
}

// testSQLTx runs fencetest.TxAtomic over SQL.Tx.
func testSQLTx(t *testing.T, db *sql.DB, s *storageguard.SQL, ph string) {
	ctx := context.Background()
	fencetest.TxAtomic(t, s, fencetest.TxAPI{
		Placeholder: ph,
		Exec:        func(stmt string) error { _, err := db.Exec(stmt); return err },
		Read: func() (c string, err error) {
			return c, db.QueryRow("SELECT content FROM files WHERE id = 'f'").Scan(&c)
		},
		Tx: func(e epoch.Epoch, then error, stmt string, args ...any) error {
			return s.Tx(ctx, "files/f", e, func(tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, stmt, args...); err != nil {
					return err
				}
				return then
			})
		},
		NilFn: func(e epoch.Epoch) error { return s.Tx(ctx, "files/f", e, nil) },
	})
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
	fencetest.TxSameEpochConcurrent(t, s, func(ctx context.Context, e epoch.Epoch, body func() error) error {
		return s.Tx(ctx, "r", e, func(*sql.Tx) error { return body() })
	})
}

// txFence presents SQL.Tx as a Fence so that the suite's random-epoch test
// runs over Tx (raise inside the transaction) as well as Do.
type txFence struct{ *storageguard.SQL }

func (f txFence) Do(ctx context.Context, resource string, e epoch.Epoch, write func(context.Context) error) error {
	return f.Tx(ctx, resource, e, func(*sql.Tx) error { return write(ctx) })
}

func TestSQLiteTxConcurrentRandomEpochs(t *testing.T) {
	db := openSQLiteDB(t, filepath.Join(t.TempDir(), "fence.db"))
	fencetest.ConcurrentRandom(t, 8, 40, txFence{openSQL(t, db, storageguard.SQLite)})
}

func TestPostgresTxConcurrentRandomEpochs(t *testing.T) {
	db := openPostgresDB(t, postgresDSN(t))
	fencetest.ConcurrentRandom(t, 8, 60, txFence{openSQL(t, db, storageguard.Postgres)})
}
