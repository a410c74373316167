// Package sqltest holds what the tests of the SQL fences (storageguard's
// sqlfence and pgfence) share: the databases they run against, a SQLite
// file or a fresh schema on the PostgreSQL server named by PostgresEnv,
// and the benchmark both report. It imports testing and the SQL drivers;
// import it from _test.go files only.
package sqltest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"
	_ "modernc.org/sqlite"             // driver "sqlite"

	"github.com/termfence/termfence/internal/skiptest"
)

// PostgresEnv names the DSN of a PostgreSQL server for the tests; they skip
// PostgreSQL when it is unset.
const PostgresEnv = "TERMFENCE_POSTGRES_DSN"

// SQLiteDSN is how the tests open a SQLite file: a busy timeout so that
// writers wait for the write lock, WAL so that readers do not block them.
func SQLiteDSN(path string) string {
	return "file:" + path + "?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)"
}

// OpenSQLite opens the SQLite file at path (SQLiteDSN), closed when the
// test ends.
func OpenSQLite(tb testing.TB, path string) *sql.DB {
	tb.Helper()
	db, err := sql.Open("sqlite", SQLiteDSN(path))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// PostgresDSN returns the DSN of the server named by PostgresEnv with a
// fresh schema first on the search_path, so that each test has its own
// termfence_fence table; the schema is dropped when the test ends. It skips
// the test when PostgresEnv is unset.
func PostgresDSN(tb testing.TB) string {
	tb.Helper()
	base := os.Getenv(PostgresEnv)
	if base == "" {
		skiptest.Skip(tb, "PostgreSQL (set "+PostgresEnv+")",
			"PostgreSQL tests skipped: set %s to a server's DSN (postgres://user@host:port/db?sslmode=disable) to run them", PostgresEnv)
	}
	var b [6]byte
	rand.Read(b[:])
	schema := "tf_" + hex.EncodeToString(b[:])
	admin, err := sql.Open("pgx", base)
	if err != nil {
		tb.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec("CREATE SCHEMA " + schema); err != nil {
		tb.Fatalf("create schema on %s: %v", PostgresEnv, err)
	}
	tb.Cleanup(func() {
		db, err := sql.Open("pgx", base)
		if err != nil {
			return
		}
		defer db.Close()
		db.Exec("DROP SCHEMA " + schema + " CASCADE")
	})
	u, err := url.Parse(base)
	if err != nil {
		tb.Fatalf("%s is not a URL: %v", PostgresEnv, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// OpenPostgres opens dsn through database/sql (driver "pgx"), closed when
// the test ends.
func OpenPostgres(tb testing.TB, dsn string) *sql.DB {
	tb.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// BenchTx sets one UPDATE in a plain transaction ("baseline-tx-update")
// beside the same UPDATE run by tx, a fence's transaction method under an
// admitted epoch ("Tx-update"); ph is the dialect's first placeholder. It
// creates table bench_files(id, n) with row 'f'.
func BenchTx(b *testing.B, db *sql.DB, ph string, tx func(ctx context.Context, fn func(*sql.Tx) error) error) {
	ctx := context.Background()
	if _, err := db.Exec("CREATE TABLE IF NOT EXISTS bench_files (id TEXT PRIMARY KEY, n BIGINT NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	db.Exec("INSERT INTO bench_files VALUES ('f', 0)")
	update := "UPDATE bench_files SET n = n + 1 WHERE id = " + ph
	b.Run("baseline-tx-update", func(b *testing.B) {
		for b.Loop() {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, update, "f"); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Tx-update", func(b *testing.B) {
		for b.Loop() {
			err := tx(ctx, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, update, "f")
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

// PostgresLockWaiters returns how many sessions of dsn's database wait
// for a lock now: fencetest.Kind.Waiting for the fences on PostgreSQL.
func PostgresLockWaiters(tb testing.TB, dsn string) int {
	tb.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&n); err != nil {
		tb.Fatalf("count the sessions waiting for a lock: %v", err)
	}
	return n
}
