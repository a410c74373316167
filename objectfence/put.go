package objectfence

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// Result describes a write that landed.
type Result struct {
	// ETag is the store's ETag of the object this write created.
	ETag string
	// Replaced is the ETag of the object it replaced, "" if the key had no
	// object. Successful writes of one key form a chain: each replaced the
	// one before it.
	Replaced string
	// Epoch is the epoch the object now carries.
	Epoch epoch.Epoch
	// Previous is the epoch the replaced object carried (zero if none, or
	// if it was written around this package).
	Previous epoch.Epoch
	// Attempts is the number of conditional writes sent (1 without
	// contention).
	Attempts int
	// Cached is true when the write was conditioned on the ETag this Store
	// remembered from its own last write of the key, with no read first.
	Cached bool

	// committed is the manifest as CommitOn wrote it (Committed).
	committed *Object
}

// Committed returns the manifest as CommitOn wrote it, for the writer's
// next CommitOn on it without reading it back (nil for a Result of any
// other call).
func (r Result) Committed() *Object { return r.committed }

// Put writes body to key under the epoch token carries, fenced: it verifies
// token, reads the object's epoch and ETag, refuses an older epoch
// (*storageguard.StaleError), another leader's epoch of the same term
// (*storageguard.ConflictError) or another cluster's
// (*storageguard.ForeignError), and writes with If-Match on the ETag it
// read (If-None-Match: * when there is no object). A 412, or a 409 with
// the code ConditionalRequestConflict or OperationAborted, means another
// writer got in between: Put reads again and decides again, at most
// Config.MaxAttempts times, then returns ErrContention. Any other 409 (a
// key that names a directory: ExistingObjectIsDirectory) is returned as
// the store's error at once. Put never writes over an object whose fencing
// metadata is malformed (ErrBadObject).
//
// No write under an epoch e lands after a write under a newer epoch of the
// same cluster landed on the same key (through this package). An error
// other than a refusal, ErrContention or ErrBadObject (a network error, a
// cancelled ctx while the request was out) leaves the outcome unknown: the
// write may have landed.
func (s *Store) Put(ctx context.Context, key string, body []byte, token string) (Result, error) {
	ep, err := s.verify(key, token)
	if err != nil {
		return Result{}, err
	}
	return s.write(ctx, key, ep, kindData, body)
}

// Commit is Put for the manifest of the manifest pattern: after the data
// objects are written under unique names (PutData), one fenced Commit of
// the manifest that names them makes them visible. A deposed writer's
// Commit is refused, so its data objects are never named by the manifest;
// Garbage lists them. Commit conditions on the epoch only, not on the
// manifest version its writer read: with Garbage, use CommitOn.
func (s *Store) Commit(ctx context.Context, manifestKey string, manifest []byte, token string) (Result, error) {
	return s.Put(ctx, manifestKey, manifest, token)
}

// Delete marks key deleted under the epoch token carries: it writes a
// deletion marker (an object of kind "deleted" with no payload) with the
// same checks and conditional write as Put, so the key keeps its epoch and
// a deposed writer cannot write it again. Get then returns a *DeletedError.
// The marker is not removed from the store: an S3 DELETE would forget the
// key's epoch, after which a writer of any older epoch could create the
// object again (If-None-Match: * would succeed).
func (s *Store) Delete(ctx context.Context, key, token string) (Result, error) {
	ep, err := s.verify(key, token)
	if err != nil {
		return Result{}, err
	}
	return s.write(ctx, key, ep, kindDeleted, nil)
}

// Highest returns the epoch key's object carries (zero if there is no
// object or it was written around this package), read with one HEAD.
func (s *Store) Highest(ctx context.Context, key string) (epoch.Epoch, error) {
	if err := validKey(key); err != nil {
		return epoch.Epoch{}, err
	}
	st, err := s.head(ctx, key)
	return st.epoch, err
}

// state is what a read of a key found.
type state struct {
	exists bool
	etag   string
	epoch  epoch.Epoch // zero: no object, or one written around this package
}

func (s *Store) write(ctx context.Context, key string, ep epoch.Epoch, k kind, payload []byte) (Result, error) {
	var nonce [nonceLen]byte
	if _, err := crand.Read(nonce[:]); err != nil {
		return Result{}, fmt.Errorf("objectfence: nonce: %w", err)
	}
	data := encode(ep, nonce, k, payload)
	meta := map[string]string{MetaEpoch: ep.String()}

	cur, cached := s.cache.get(key)
	if cached {
		if _, err := storageguard.Decide(key, cur.epoch, ep); err != nil {
			// The entry is a lower bound of the key's epoch; report the
			// refusal against what the store holds now.
			s.cache.drop(key)
			cached = false
		}
	}
	for attempt := 1; ; attempt++ {
		if !cached {
			var err error
			if cur, err = s.read(ctx, key, ep); err != nil {
				return Result{}, err
			}
		}
		in := &s3.PutObjectInput{
			Bucket:        aws.String(s.bucket),
			Key:           aws.String(key),
			Body:          bytes.NewReader(data),
			ContentLength: aws.Int64(int64(len(data))),
			Metadata:      meta,
		}
		if cur.exists {
			in.IfMatch = aws.String(cur.etag)
		} else {
			in.IfNoneMatch = aws.String("*")
		}
		out, err := s.api.PutObject(ctx, in)
		if err == nil {
			res := Result{Replaced: cur.etag, Epoch: ep, Previous: cur.epoch, Attempts: attempt, Cached: cached}
			if out != nil && out.ETag != nil {
				res.ETag = *out.ETag
			}
			if res.ETag != "" {
				s.cache.put(key, state{exists: true, etag: res.ETag, epoch: ep})
			} else {
				s.cache.drop(key)
			}
			return res, nil
		}
		s.cache.drop(key)
		if !lostRace(err) {
			return Result{}, fmt.Errorf("objectfence: put %q: %w", key, err)
		}
		if attempt >= s.attempts {
			return Result{}, fmt.Errorf("%w: put %q: %d conditional writes lost: %w", ErrContention, key, attempt, err)
		}
		cached = false
		if err := backoff(ctx, attempt); err != nil {
			return Result{}, err
		}
	}
}

// read returns the key's state for a conditional write under ep, or the
// refusal of ep. One HEAD may be torn on a store that reads an object's
// metadata and its ETag one after the other while a write replaces the
// object (versitygw's posix backend reads them by path, metadata first):
// it could pair an older write's epoch with a newer write's ETag, and a
// write conditioned on that ETag would land over the newer epoch. So an
// acceptance needs two HEADs that report the same ETag: the ETag was
// current when the first read it and is current when the write lands, and
// every fenced write has unique bytes (the nonce), so the object did not
// change in between, and the second HEAD's epoch is that object's. A
// refusal needs one HEAD: an epoch it reports was written, and epochs of a
// key only grow.
func (s *Store) read(ctx context.Context, key string, ep epoch.Epoch) (state, error) {
	prev, err := s.head(ctx, key)
	if err != nil {
		return state{}, err
	}
	for i := 1; ; i++ {
		if _, err := storageguard.Decide(key, prev.epoch, ep); err != nil {
			return state{}, err
		}
		if !prev.exists {
			// If-None-Match: * decides at the store; no epoch to pair.
			return prev, nil
		}
		next, err := s.head(ctx, key)
		if err != nil {
			return state{}, err
		}
		if next.exists && next.etag == prev.etag {
			if _, err := storageguard.Decide(key, next.epoch, ep); err != nil {
				return state{}, err
			}
			return next, nil
		}
		if i >= s.attempts {
			return state{}, fmt.Errorf("%w: %q changed between every pair of reads (%d)", ErrContention, key, i)
		}
		prev = next
	}
}

// head reads key's ETag and epoch with one HEAD.
func (s *Store) head(ctx context.Context, key string) (state, error) {
	out, err := s.api.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		if status(err) == http.StatusNotFound {
			return state{}, nil
		}
		return state{}, fmt.Errorf("objectfence: head %q: %w", key, err)
	}
	if out == nil || out.ETag == nil || *out.ETag == "" {
		return state{}, fmt.Errorf("%w: %q exists but the store sent no ETag, so no write can be conditioned on it", ErrBadObject, key)
	}
	ep, _, err := epochFromMetadata(out.Metadata)
	if err != nil {
		return state{}, fmt.Errorf("objectfence: %q: %w", key, err)
	}
	return state{exists: true, etag: *out.ETag, epoch: ep}, nil
}

// lostRace reports whether err is the store's answer that the condition
// failed, so another writer got in between: 412 Precondition Failed, 409
// ConditionalRequestConflict (or OperationAborted, S3's answer while a
// conflicting conditional request is in progress), or 404 for If-Match on
// an object that is gone. Nothing was written. Any other 409 is told apart
// by its code and is no race: a retry cannot help (versitygw's
// ExistingObjectIsDirectory, for a key that names a directory of its
// posix backend, or ObjectParentIsFile), so it is returned as it is, not
// retried and reported as contention.
func lostRace(err error) bool {
	switch status(err) {
	case http.StatusPreconditionFailed:
		return true
	case http.StatusConflict:
		var ae interface{ ErrorCode() string }
		if !errors.As(err, &ae) {
			return true // a 409 without a code: taken as the race S3 documents
		}
		switch ae.ErrorCode() {
		case "ConditionalRequestConflict", "OperationAborted":
			return true
		}
		return false
	case http.StatusNotFound:
		// Not NoSuchBucket: that is no race, and retrying cannot help.
		var ae interface{ ErrorCode() string }
		return errors.As(err, &ae) && ae.ErrorCode() == "NoSuchKey"
	}
	return false
}

// status returns the HTTP status of the store's answer in err, or 0 if err
// carries none (the request may not have reached the store, or its answer
// was lost).
func status(err error) int {
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// backoff waits a random time that grows with attempt (up to about 50 ms),
// so that writers that keep losing to each other spread out; ctx ends it.
func backoff(ctx context.Context, attempt int) error {
	max := time.Millisecond << min(attempt, 6)
	t := time.NewTimer(time.Duration(rand.Int64N(int64(max))))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// etagCache remembers, per key, the ETag and epoch of this Store's last
// write that landed. Using an entry is safe without a read: a write
// conditioned on its ETag lands only if the object is still the one this
// Store wrote (fenced bytes are unique), whose epoch is the entry's; if it
// is not, the store answers 412 and the entry is dropped.
type etagCache struct {
	mu  sync.Mutex
	max int
	m   map[string]state
}

func newETagCache(max int) *etagCache { return &etagCache{max: max, m: make(map[string]state)} }

func (c *etagCache) get(key string) (state, bool) {
	if c == nil {
		return state{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.m[key]
	return st, ok
}

func (c *etagCache) put(key string, st state) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; !ok && len(c.m) >= c.max {
		for k := range c.m { // evict one, any
			delete(c.m, k)
			break
		}
	}
	c.m[key] = st
}

func (c *etagCache) drop(key string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, key)
}
