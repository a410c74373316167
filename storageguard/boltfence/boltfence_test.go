package boltfence_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/boltfence"
	"github.com/termfence/termfence/storageguard/fencetest"
)

func ep(term uint64, leader string) epoch.Epoch {
	return epoch.Epoch{Cluster: "payments", Term: term, Leader: leader}
}

func open(t testing.TB, path string) *boltfence.Fence {
	t.Helper()
	f, err := boltfence.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestFence(t *testing.T) {
	var path string
	var last *boltfence.Fence // the fence the running subtest opened
	fencetest.Run(t, fencetest.Kind{
		Open: func(t *testing.T) storageguard.Fence {
			path = filepath.Join(t.TempDir(), "fence.db")
			last = open(t, path)
			return last
		},
		Reopen:           func(t *testing.T) storageguard.Fence { return open(t, path) },
		Waiting:          func(*testing.T) int { return last.Waiting("r") },
		InProcessWaiting: func(_ *testing.T, r string) int { return last.Waiting(r) },
		Goroutines:       16, Ops: 300,
	})
}

// TestMultiProcess: processes that take turns with the file (bbolt admits
// one at a time) never let an older epoch's write overlap a newer one's.
func TestMultiProcess(t *testing.T) {
	t.Parallel()
	fencetest.MultiProcess(t, durable)
}

// TestCrashDurability: no acknowledged raise is lost to a SIGKILL.
func TestCrashDurability(t *testing.T) {
	t.Parallel()
	fencetest.CrashDurability(t, durable)
}

func TestLockedByAnotherOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	open(t, path)
	_, err := boltfence.Open(path)
	if !errors.Is(err, boltfence.ErrLocked) {
		t.Fatalf("second Open = %v, want ErrLocked", err)
	}
}

func TestOpenNotABoltFile(t *testing.T) {
	// A directory is not a bbolt file: a clear error, no panic.
	if _, err := boltfence.Open(t.TempDir()); err == nil {
		t.Fatal("Open on a directory succeeded")
	}
}

func TestCloseWaitsForWrites(t *testing.T) {
	f := open(t, filepath.Join(t.TempDir(), "fence.db"))
	ctx := context.Background()
	entered, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- f.Do(ctx, "r", ep(3, "a"), func(context.Context) error {
			close(entered)
			<-release
			return nil
		})
	}()
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- f.Close() }()
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}

// BenchmarkBolt sets a same-epoch Do and a raise beside a bare write and
// fsync (fencetest.BenchDurable), and beside the baseline a raise is one of:
// an unguarded bbolt transaction writing one small value. bbolt's commit
// syncs twice (the data pages, then the meta page that points to them — its
// crash safety needs that order), so a raise costs what any bbolt write
// costs, not one fdatasync.
func BenchmarkBolt(b *testing.B) {
	fencetest.BenchDurable(b, func(b *testing.B, dir string) storageguard.Fence {
		f, err := boltfence.Open(filepath.Join(dir, "fence.db"))
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

// TestStableBeforeUse: every raise is on stable storage (written and
// fdatasynced, the file's directory entry fsynced) before the write runs
// or Admit returns, on the child's real system calls.
func TestStableBeforeUse(t *testing.T) {
	fencetest.StableBeforeUse(t, durable, nil)
}
