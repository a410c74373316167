package boltfence

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/internal/dirsync"
)

// ErrLocked is returned by Open when another process holds the fence file
// open: bbolt allows one process per file.
var ErrLocked = errors.New("boltfence: fence file is locked by another process")

// OpenTimeout is how long Open waits for another process to release the
// fence file before it fails with ErrLocked.
const OpenTimeout = time.Second

// bucket holds one key per resource (its name, as bytes) whose value is the
// binary form of its highest epoch.
var bucket = []byte("termfence_fence")

// Fence is a durable storageguard.Fence in one bbolt file, for a resource
// owner that is a single process (bbolt locks the file against other
// processes; use storageguard/dirfence or storageguard/sqlfence when
// several processes guard the same resources).
//
// The file is the durable record; each resource's highest epoch is also
// cached in memory (a storageguard.Cached fence over the file). A write
// under the current epoch therefore touches no disk. A raise is one bbolt
// transaction, fsynced before Do runs the write or Admit returns; Open
// fsyncs the file's directory and each of its ancestors, so that a file it
// created, in a directory the application may just have created, survives
// a power cut too.
type Fence struct {
	cache *storageguard.Cached
	db    *bolt.DB

	closeOnce sync.Once
	closeErr  error
}

var _ storageguard.Fence = (*Fence)(nil)

// Open opens or creates the fence file at path. If another process has the
// file open it waits up to OpenTimeout, then fails with an error wrapping
// ErrLocked.
func Open(path string) (*Fence, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: OpenTimeout})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s (waited %v)", ErrLocked, path, OpenTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("boltfence: open %s: %w", path, err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucket)
		return err
	}); err != nil {
		db.Close()
		return nil, fmt.Errorf("boltfence: init %s: %w", path, err)
	}
	// bbolt fsyncs the file, never its directory: a file it just created
	// could vanish in a power cut, and every raise with it (I5), and so
	// could a directory the application just created for it. Sync the
	// file's name and its directory's whole path once, before any raise is
	// acknowledged.
	if err := dirsync.Path(filepath.Dir(path)); err != nil {
		db.Close()
		return nil, fmt.Errorf("boltfence: sync the directory of %s: %w", path, err)
	}
	return &Fence{cache: storageguard.NewCached(store{db}), db: db}, nil
}

// store is the storageguard.Store of a Fence: the bbolt file.
type store struct{ db *bolt.DB }

func (s store) Load(_ context.Context, resource string) (epoch.Epoch, error) {
	var e epoch.Epoch
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucket).Get([]byte(resource))
		if v == nil {
			return nil
		}
		if err := e.UnmarshalBinary(v); err != nil {
			return fmt.Errorf("boltfence: record for %q is corrupt: %w", resource, err)
		}
		return nil
	})
	return e, err
}

func (s store) Raise(_ context.Context, resource string, ep epoch.Epoch) error {
	v, err := ep.MarshalBinary()
	if err != nil {
		return err
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).Put([]byte(resource), v)
	})
	if err != nil {
		return fmt.Errorf("boltfence: raise of %q to %s: %w", resource, ep, err)
	}
	return nil
}

// Do implements storageguard.Fence.Do (see storageguard.Cached.Do: every
// wait ends with ctx, and write may call the fence for the same resource
// with the context it was given).
func (f *Fence) Do(ctx context.Context, resource string, ep epoch.Epoch, write func(ctx context.Context) error) error {
	return f.cache.Do(ctx, resource, ep, write)
}

// Admit implements storageguard.Fence.Admit.
func (f *Fence) Admit(ctx context.Context, resource string, ep epoch.Epoch) error {
	return f.cache.Do(ctx, resource, ep, nil)
}

// Check implements storageguard.Fence.Check.
func (f *Fence) Check(ctx context.Context, resource string, ep epoch.Epoch) error {
	return f.cache.Check(ctx, resource, ep)
}

// Highest implements storageguard.Fence.Highest.
func (f *Fence) Highest(ctx context.Context, resource string) (epoch.Epoch, error) {
	return f.cache.Highest(ctx, resource)
}

// Close waits for calls in progress, then closes the file. Later calls fail
// with storageguard.ErrClosed.
func (f *Fence) Close() error {
	f.closeOnce.Do(func() {
		f.cache.Close()
		f.closeErr = f.db.Close()
	})
	return f.closeErr
}
