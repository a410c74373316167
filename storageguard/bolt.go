package storageguard

import (
	"context"
	"errors"
	"fmt"
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
// single process.
type Bolt struct {
	*Cached
	db *bolt.DB
}

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
	return &Bolt{Cached: NewCached(boltStore{db}), db: db}, nil
}

// boltStore is the store of a Bolt fence.
type boltStore struct{ db *bolt.DB }

func (s boltStore) Load(_ context.Context, resource string) (epoch.Epoch, error) {
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

func (s boltStore) Raise(_ context.Context, resource string, ep epoch.Epoch) error {
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

// Close waits for calls in progress, then closes the file.
func (b *Bolt) Close() error {
	b.Cached.Close()
	return b.db.Close()
}
