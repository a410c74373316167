package sqlfence_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/termfence/termfence/storageguard/internal/sqltest"
	"github.com/termfence/termfence/storageguard/sqlfence"
)

// benchSQL sets Fence.Tx running one UPDATE beside the same UPDATE in a
// plain transaction (target ratio <= 1.15), over db in dialect d with
// placeholder ph.
func benchSQL(b *testing.B, db *sql.DB, d sqlfence.Dialect, ph string) {
	f := open(b, db, d)
	e := ep(7, "node-a")
	if err := f.Admit(context.Background(), "files/f", e); err != nil {
		b.Fatal(err)
	}
	sqltest.BenchTx(b, db, ph, func(ctx context.Context, fn func(*sql.Tx) error) error {
		return f.Tx(ctx, "files/f", e, fn)
	})
}

func BenchmarkSQLite(b *testing.B) {
	benchSQL(b, sqltest.OpenSQLite(b, filepath.Join(b.TempDir(), "bench.db")), sqlfence.SQLite, "?")
}

func BenchmarkPostgres(b *testing.B) {
	benchSQL(b, sqltest.OpenPostgres(b, sqltest.PostgresDSN(b)), sqlfence.Postgres, "$1")
}
