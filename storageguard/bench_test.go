//go:build unix

package storageguard_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/termfence/termfence/storageguard"
)

// benchSQL compares SQL.Tx running one UPDATE with the same UPDATE in a
// plain transaction (target ratio <= 1.15).
func benchSQL(b *testing.B, db *sql.DB, d storageguard.Dialect, ph string) {
	ctx := context.Background()
	s, err := storageguard.OpenSQL(ctx, db, d)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE IF NOT EXISTS bench_files (id TEXT PRIMARY KEY, n BIGINT NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	db.Exec("INSERT INTO bench_files VALUES ('f', 0)")
	update := "UPDATE bench_files SET n = n + 1 WHERE id = " + ph
	e := ep(7, "node-a")
	if err := s.Admit(ctx, "files/f", e); err != nil {
		b.Fatal(err)
	}
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
			err := s.Tx(ctx, "files/f", e, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, update, "f")
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkSQLite(b *testing.B) {
	benchSQL(b, openSQLiteDB(b, filepath.Join(b.TempDir(), "bench.db")), storageguard.SQLite, "?")
}

func BenchmarkPostgres(b *testing.B) {
	benchSQL(b, openPostgresDB(b, postgresDSN(b)), storageguard.Postgres, "$1")
}
