package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/boltfence"
	"github.com/termfence/termfence/storageguard/httpfence"
)

// boltBackend keeps the fence in a boltfence file and the records in
// a second bbolt file beside it (bbolt lets one owner open a file; the fence
// owns its own). The write path is httpfence.Middleware: the record
// handler runs inside the fence's Do, after a raise is durable, and no newer
// epoch is admitted until it has returned — so a record is never written
// under an epoch older than the fence's, and an acknowledged record write is
// fsynced.
type boltBackend struct {
	f  storageguard.Fence // boltfence, or (store_fences.go) another fence
	db *bolt.DB
	// delay, if set, is how long a fenced write waits before it writes
	// the record (storeConfig.WriteDelay).
	delay func()
}

var _ backend = (*boltBackend)(nil)

var recordsBucket = []byte("cluster_records")

// boltRecord is a record as stored in bbolt.
type boltRecord struct {
	Value string `json:"value"`
	Epoch string `json:"epoch"`
}

// openBoltFence opens the boltfence file at path.
func openBoltFence(path string) (storageguard.Fence, error) {
	f, err := boltfence.Open(path)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return f, nil
}

// openRecords opens the records at path + "-records" beside fence f, which
// the backend closes.
func openRecords(f storageguard.Fence, path string) (*boltBackend, error) {
	rpath := path + "-records"
	db, err := bolt.Open(rpath, 0o600, &bolt.Options{Timeout: time.Second})
	if err == nil {
		err = db.Update(func(tx *bolt.Tx) error {
			_, err := tx.CreateBucketIfNotExists(recordsBucket)
			return err
		})
		if err != nil {
			_ = db.Close()
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("store: open records %s: %w", rpath, err)
	}
	return &boltBackend{f: f, db: db}, nil
}

func (b *boltBackend) put(_ context.Context, rec record) error {
	v, err := json.Marshal(boltRecord{Value: rec.Value, Epoch: rec.Epoch.String()})
	if err != nil {
		return err
	}
	err = b.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(recordsBucket).Put([]byte(rec.Resource), v)
	})
	if err != nil {
		return fmt.Errorf("store: write %q: %w", rec.Resource, err)
	}
	return nil
}

func (b *boltBackend) get(_ context.Context, resource string) (record, bool, error) {
	var raw []byte
	err := b.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(recordsBucket).Get([]byte(resource)); v != nil {
			raw = append([]byte(nil), v...)
		}
		return nil
	})
	if err != nil {
		return record{}, false, fmt.Errorf("store: read %q: %w", resource, err)
	}
	if raw == nil {
		return record{}, false, nil
	}
	var br boltRecord
	if err := json.Unmarshal(raw, &br); err != nil {
		return record{}, false, fmt.Errorf("store: record %q is corrupt: %w", resource, err)
	}
	ep, err := epoch.Parse(br.Epoch)
	if err != nil {
		return record{}, false, fmt.Errorf("store: record %q is corrupt: %w", resource, err)
	}
	return record{Resource: resource, Value: br.Value, Epoch: ep}, true, nil
}

func (b *boltBackend) resources(context.Context) ([]string, error) {
	var names []string
	err := b.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(recordsBucket).ForEach(func(k, _ []byte) error {
			names = append(names, string(k))
			return nil
		})
	})
	return names, err
}

func (b *boltBackend) fence() storageguard.Fence { return b.f }

// fencedWriter is httpfence.Middleware around the record write: the
// middleware verifies the token and runs the handler inside Guard.Do for the
// request's resource.
func (b *boltBackend) fencedWriter(g *storageguard.Guard) http.Handler {
	mw := httpfence.Middleware(g, func(r *http.Request) string { return requestOf(r).Resource })
	return mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := requestOf(r)
		ep, ok := httpfence.EpochFrom(r.Context())
		if !ok {
			// Unreachable behind Middleware; refuse rather than write unfenced.
			writeError(w, http.StatusInternalServerError, "store: write reached the handler without an admitted epoch")
			return
		}
		if b.delay != nil {
			b.delay()
		}
		if err := b.put(r.Context(), record{Resource: req.Resource, Value: req.Value, Epoch: ep}); err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		accept(w, ep)
	}))
}

func (b *boltBackend) close() error {
	return errors.Join(b.f.Close(), b.db.Close())
}
