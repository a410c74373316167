package storageguard_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/fencetest"
)

func openBolt(t *testing.T, path string) *storageguard.Bolt {
	t.Helper()
	b, err := storageguard.OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestBolt(t *testing.T) {
	var path string
	fencetest.Run(t, fencetest.Kind{
		Open: func(t *testing.T) storageguard.Fence {
			path = filepath.Join(t.TempDir(), "fence.db")
			return openBolt(t, path)
		},
		Reopen:     func(t *testing.T) storageguard.Fence { return openBolt(t, path) },
		Goroutines: 16, Ops: 300,
	})
}

func TestBoltLockedByAnotherOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	openBolt(t, path)
	_, err := storageguard.OpenBolt(path)
	if !errors.Is(err, storageguard.ErrLocked) {
		t.Fatalf("second OpenBolt = %v, want ErrLocked", err)
	}
}

func TestBoltOpenNotABoltFile(t *testing.T) {
	// A directory is not a bbolt file: a clear error, no panic.
	if _, err := storageguard.OpenBolt(t.TempDir()); err == nil {
		t.Fatal("OpenBolt on a directory succeeded")
	}
}

func TestBoltCloseWaitsForWrites(t *testing.T) {
	b := openBolt(t, filepath.Join(t.TempDir(), "fence.db"))
	ctx := context.Background()
	entered, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- b.Do(ctx, "r", ep(3, "a"), func(context.Context) error {
			close(entered)
			<-release
			return nil
		})
	}()
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}
