package storageguard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/termfence/termfence/epoch"
)

// ErrLocked is returned by OpenBolt when another process holds the fence
// file open: bbolt allows one process per file.
var ErrLocked = errors.New("storageguard: fence file is locked by another process")

// BoltOpenTimeout is how long OpenBolt waits for another process to release
// the fence file before it fails with ErrLocked.
const BoltOpenTimeout = time.Second

// boltBucket holds one key per resource (its name, as bytes) whose value is
// the binary form of its highest epoch.
var boltBucket = []byte("termfence_fence")

// Bolt is a durable Fence in one bbolt file, for a resource owner that is a
// single process (bbolt locks the file against other processes; use Dir or
// SQL when several processes guard the same resources).
//
// The file is the durable record; each resource's highest epoch is also
// cached in memory under a per-resource read-write lock, as in Memory. A
// write under the current epoch therefore touches no disk. A raise is one
// bbolt transaction, fsynced before Do runs the write or Admit returns.
type Bolt struct {
	closed  atomic.Bool
	db      *bolt.DB
	entries sync.Map // resource -> *entry
	// inflight counts calls in progress so that Close can wait for them
	// before closing the file.
	inflight sync.WaitGroup
	closeMu  sync.RWMutex // read: a call is starting; write: Close
}

var _ Fence = (*Bolt)(nil)

// OpenBolt opens or creates the fence file at path. If another process has
// the file open it waits up to BoltOpenTimeout, then fails with an error
// wrapping ErrLocked.
func OpenBolt(path string) (*Bolt, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: BoltOpenTimeout})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s (waited %v)", ErrLocked, path, BoltOpenTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("storageguard: open bolt fence %s: %w", path, err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(boltBucket)
		return err
	}); err != nil {
		db.Close()
		return nil, fmt.Errorf("storageguard: init bolt fence %s: %w", path, err)
	}
	return &Bolt{db: db}, nil
}

// boltStore is the store of a Bolt fence.
type boltStore struct{ db *bolt.DB }

func (s boltStore) load(resource string) (epoch.Epoch, error) {
	var e epoch.Epoch
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(boltBucket).Get([]byte(resource))
		if v == nil {
			return nil
		}
		if err := e.UnmarshalBinary(v); err != nil {
			return fmt.Errorf("storageguard: bolt fence record for %q is corrupt: %w", resource, err)
		}
		return nil
	})
	return e, err
}

func (s boltStore) raise(resource string, ep epoch.Epoch) error {
	v, err := ep.MarshalBinary()
	if err != nil {
		return err
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(boltBucket).Put([]byte(resource), v)
	})
	if err != nil {
		return fmt.Errorf("storageguard: bolt fence raise of %q to %s: %w", resource, ep, err)
	}
	return nil
}

// enter registers a call; it fails once Close has begun.
func (b *Bolt) enter() error {
	b.closeMu.RLock()
	defer b.closeMu.RUnlock()
	if b.closed.Load() {
		return ErrClosed
	}
	b.inflight.Add(1)
	return nil
}

// Do implements Fence.Do. write must not call the fence for the same
// resource.
func (b *Bolt) Do(ctx context.Context, resource string, ep epoch.Epoch, write func(ctx context.Context) error) error {
	if err := ValidateResource(resource); err != nil {
		return err
	}
	if err := b.enter(); err != nil {
		return err
	}
	defer b.inflight.Done()
	return table{&b.entries}.get(resource).do(ctx, resource, ep, boltStore{b.db}, write)
}

// Admit implements Fence.Admit.
func (b *Bolt) Admit(ctx context.Context, resource string, ep epoch.Epoch) error {
	return b.Do(ctx, resource, ep, nil)
}

// Check implements Fence.Check.
func (b *Bolt) Check(ctx context.Context, resource string, ep epoch.Epoch) error {
	h, err := b.Highest(ctx, resource)
	if err != nil {
		return err
	}
	_, err = Decide(resource, h, ep)
	return err
}

// Highest implements Fence.Highest.
func (b *Bolt) Highest(ctx context.Context, resource string) (epoch.Epoch, error) {
	if err := ValidateResource(resource); err != nil {
		return epoch.Epoch{}, err
	}
	if err := b.enter(); err != nil {
		return epoch.Epoch{}, err
	}
	defer b.inflight.Done()
	if err := ctx.Err(); err != nil {
		return epoch.Epoch{}, err
	}
	if e, ok := (table{&b.entries}).lookup(resource); ok {
		return e.current(resource, boltStore{b.db})
	}
	// Unknown to the cache: read the file without creating an entry.
	return boltStore{b.db}.load(resource)
}

// Close waits for calls in progress, then closes the file. Later calls fail
// with ErrClosed.
func (b *Bolt) Close() error {
	b.closeMu.Lock()
	already := b.closed.Swap(true)
	b.closeMu.Unlock()
	if already {
		return nil
	}
	b.inflight.Wait()
	return b.db.Close()
}
