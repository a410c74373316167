package sqlfence_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/termfence/termfence/storageguard/internal/sqltest"
	"github.com/termfence/termfence/storageguard/sqlfence"
)

// BenchmarkDo is a same-epoch Do with an empty write on each dialect: the
// fence transaction that holds the lock while the write runs, and its
// commit.
func BenchmarkDo(b *testing.B) {
	ctx := context.Background()
	run := func(b *testing.B, f *sqlfence.Fence) {
		e := ep(7, "node-a")
		if err := f.Admit(ctx, "files/f", e); err != nil {
			b.Fatal(err)
		}
		write := func(context.Context) error { return nil }
		for b.Loop() {
			if err := f.Do(ctx, "files/f", e, write); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("sqlite", func(b *testing.B) {
		run(b, open(b, sqltest.OpenSQLite(b, filepath.Join(b.TempDir(), "bench.db")), sqlfence.SQLite))
	})
	b.Run("postgres", func(b *testing.B) {
		run(b, open(b, sqltest.OpenPostgres(b, sqltest.PostgresDSN(b)), sqlfence.Postgres))
	})
}
