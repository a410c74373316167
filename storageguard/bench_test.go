//go:build unix

package storageguard_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/fencetest"
)

// BenchmarkDirSyscalls measures the system calls a Dir.Do pays when it
// takes the resource's shared lock from scratch (flock shared + unlock, one
// pread of the two slots; the intent lock adds another flock pair), and a
// trivial system call. A same-epoch Do while the process holds the lock
// makes none (BenchmarkDirSameEpoch).
func BenchmarkDirSyscalls(b *testing.B) {
	fh, err := os.Create(filepath.Join(b.TempDir(), "x"))
	if err != nil {
		b.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.Write(make([]byte, 4608)); err != nil {
		b.Fatal(err)
	}
	fd := int(fh.Fd())
	b.Run("flock-shared-and-unlock", func(b *testing.B) {
		for b.Loop() {
			syscall.Flock(fd, syscall.LOCK_SH)
			syscall.Flock(fd, syscall.LOCK_UN)
		}
	})
	b.Run("pread-4608", func(b *testing.B) {
		buf := make([]byte, 4608)
		for b.Loop() {
			syscall.Pread(fd, buf, 0)
		}
	})
	b.Run("fstat", func(b *testing.B) {
		var st syscall.Stat_t
		for b.Loop() {
			syscall.Fstat(fd, &st)
		}
	})
	b.Run("getppid", func(b *testing.B) {
		for b.Loop() {
			syscall.Getppid()
		}
	})
}

func BenchmarkDir(b *testing.B) {
	fencetest.BenchDurable(b, func(b *testing.B, dir string) storageguard.Fence {
		f, err := storageguard.OpenDir(dir)
		if err != nil {
			b.Fatal(err)
		}
		return f
	})
}

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
