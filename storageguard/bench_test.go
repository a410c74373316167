//go:build unix

package storageguard_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/termfence/termfence/storageguard"
)

// mutexMap is the unguarded baseline: a map write under one mutex.
type mutexMap struct {
	mu sync.Mutex
	m  map[string]int
}

func (m *mutexMap) write(k string, v int) {
	m.mu.Lock()
	m.m[k] = v
	m.mu.Unlock()
}

// BenchmarkMemory compares a same-epoch Memory.Do with the mutex-guarded
// map write it would typically protect (target: Do <= 2x baseline), serial
// and with b.RunParallel.
func BenchmarkMemory(b *testing.B) {
	benchSameEpoch(b, func(*testing.B) storageguard.Fence { return storageguard.NewMemory() })
}

// benchSameEpoch sets a same-epoch Do of the fence open returns beside the
// unguarded write it would typically protect, a map write under a mutex,
// serial and with b.RunParallel.
func benchSameEpoch(b *testing.B, open func(b *testing.B) storageguard.Fence) {
	ctx := context.Background()
	e := ep(7, "node-a")
	noop := func(context.Context) error { return nil }
	admitted := func(b *testing.B) storageguard.Fence {
		f := open(b)
		b.Cleanup(func() { f.Close() })
		if err := f.Admit(ctx, "r", e); err != nil {
			b.Fatal(err)
		}
		return f
	}
	b.Run("baseline-mutex-map-write", func(b *testing.B) {
		mm := &mutexMap{m: map[string]int{}}
		for i := 0; b.Loop(); i++ {
			mm.write("r", i)
		}
	})
	b.Run("Do-empty-write", func(b *testing.B) {
		f := admitted(b)
		for b.Loop() {
			if err := f.Do(ctx, "r", e, noop); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Do-mutex-map-write", func(b *testing.B) {
		f := admitted(b)
		mm := &mutexMap{m: map[string]int{}}
		i := 0
		w := func(context.Context) error { mm.write("r", i); return nil }
		for b.Loop() {
			i++
			if err := f.Do(ctx, "r", e, w); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel-baseline-mutex-map-write", func(b *testing.B) {
		mm := &mutexMap{m: map[string]int{}}
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				mm.write("r", i)
			}
		})
	})
	b.Run("parallel-Do-one-resource", func(b *testing.B) {
		f := admitted(b)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := f.Do(ctx, "r", e, noop); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("parallel-Do-own-resource", func(b *testing.B) {
		f := admitted(b)
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			r := fmt.Sprintf("r%d", n.Add(1))
			if err := f.Admit(ctx, r, e); err != nil {
				b.Error(err)
				return
			}
			for pb.Next() {
				if err := f.Do(ctx, r, e, noop); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// benchFile compares a same-epoch Do (no disk write) and a raise (one
// fsync) with the baseline of one write+fsync of a small file in the same
// directory.
func benchFile(b *testing.B, open func(b *testing.B, dir string) storageguard.Fence) {
	ctx := context.Background()
	noop := func(context.Context) error { return nil }
	b.Run("Do-same-epoch", func(b *testing.B) {
		f := open(b, b.TempDir())
		defer f.Close()
		e := ep(7, "node-a")
		f.Admit(ctx, "r", e)
		for b.Loop() {
			if err := f.Do(ctx, "r", e, noop); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raise", func(b *testing.B) {
		f := open(b, b.TempDir())
		defer f.Close()
		t := uint64(0)
		for b.Loop() {
			t++
			if err := f.Admit(ctx, "r", ep(t, "node-a")); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline-write-fsync", func(b *testing.B) {
		fh, err := os.Create(filepath.Join(b.TempDir(), "x"))
		if err != nil {
			b.Fatal(err)
		}
		defer fh.Close()
		for b.Loop() {
			if _, err := fh.WriteAt([]byte("payments/7/node-a\n"), 0); err != nil {
				b.Fatal(err)
			}
			if err := fh.Sync(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

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

// BenchmarkBolt adds to benchFile's figures the baseline a Bolt raise is
// one of: an unguarded bbolt transaction writing one small value. bbolt's
// commit syncs twice (the data pages, then the meta page that points to
// them — its crash safety needs that order), so a raise costs what any
// bbolt write costs, not one fdatasync.
func BenchmarkBolt(b *testing.B) {
	benchFile(b, func(b *testing.B, dir string) storageguard.Fence {
		f, err := storageguard.OpenBolt(filepath.Join(dir, "fence.db"))
		if err != nil {
			b.Fatal(err)
		}
		return f
	})
	b.Run("baseline-bbolt-update", func(b *testing.B) {
		db, err := bolt.Open(filepath.Join(b.TempDir(), "x.db"), 0o600, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		v := []byte("payments/7/node-a")
		for b.Loop() {
			err := db.Update(func(tx *bolt.Tx) error {
				bk, err := tx.CreateBucketIfNotExists([]byte("x"))
				if err != nil {
					return err
				}
				return bk.Put([]byte("r"), v)
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkDir(b *testing.B) {
	benchFile(b, func(b *testing.B, dir string) storageguard.Fence {
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
