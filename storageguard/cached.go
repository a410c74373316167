package storageguard

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard/internal/gate"
)

// Store is the durable record under a Cached fence: the highest epoch of
// each resource. It is the one thing a backend for a store that a single
// process owns (a bbolt file, a local key-value store) has to write; Cached
// supplies the admission rule, the locking and the cache.
//
// Cached calls Store's methods with the caller's context, never two of them
// for one resource at once, and Raise only with an epoch that Decide
// accepted as newer than the last value Load or Raise gave for that
// resource, so a Store never has to compare epochs itself.
type Store interface {
	// Load returns the highest epoch recorded for resource, or the zero
	// Epoch if none is.
	Load(ctx context.Context, resource string) (epoch.Epoch, error)
	// Raise records ep as the highest epoch of resource. When it returns
	// nil the record must survive a crash of the process and of the machine
	// (fsync, or a database's commit): Do runs the write right after it
	// (docs/DESIGN.md I5). When it returns an error the fence forgets what
	// it cached for resource and calls Load before it decides again, so a
	// Raise that failed half-way (written but not known to be durable) is
	// read back rather than guessed.
	Raise(ctx context.Context, resource string, ep epoch.Epoch) error
}

// Cached is a Fence that keeps each resource's highest epoch in memory in
// front of a Store that makes it durable. It is the building block of the
// in-process fences: Memory is a Cached fence without a Store, and
// storageguard/boltfence is one over a bbolt file. A fence for another store
// that one process owns implements Store and returns a Cached fence (or
// wraps one, to close the store after Close).
//
// There is no global lock on the hot path: each resource has its own entry
// with a shared-exclusive lock. Writes under the resource's current epoch
// hold the shared side and run concurrently, and touch neither the Store
// nor the disk; a raise takes the exclusive side, so it waits for the
// writes still running under the older epoch, records the new epoch
// through Store.Raise, and from then on the older epoch is refused
// (docs/DESIGN.md I4). Raises queue first come, first served, and writes
// arriving while one waits queue behind it (a stream of older-epoch writes
// does not starve it); every wait ends with its context; a second writer
// of an epoch that another raised while it waited does not wait for that
// one's write; a call nested in a write joins the write's hold.
//
// The cache is the truth between raises: a resource is read from the Store
// once, when it is first used (or after a failed Raise), and decided in
// memory from then on. The Store must therefore belong to this fence alone:
// a raise made through another process, or another Cached fence over the
// same store, would not be seen, and both would admit their own epochs. A
// store that several processes share needs a fence that decides inside the
// store, in the same atomic step as the raise (storageguard/sqlfence does
// it in a transaction, storageguard/dirfence under flock); such a fence
// implements Fence itself and applies Decide.
type Cached struct {
	store   Store
	closed  atomic.Bool
	entries sync.Map // resource string -> *entry
	// With a Store, inflight counts the calls in progress so that Close can
	// wait for them; closeMu orders the count against Close.
	inflight sync.WaitGroup
	closeMu  sync.RWMutex // read: a call is starting; write: Close
}

var _ Fence = (*Cached)(nil)

// NewCached returns a fence that caches the highest epochs of s. A nil s
// keeps nothing durable: the fence is then an in-memory one, like Memory.
func NewCached(s Store) *Cached { return &Cached{store: s} }

// entry is one resource's in-process state.
type entry struct {
	// g: same-epoch writers hold the shared side while their write runs; a
	// raise (or the first load) holds the exclusive side.
	g       gate.Gate
	loaded  bool        // guarded by g: highest was read from the store
	highest epoch.Epoch // guarded by g: written only under the exclusive side
}

func (c *Cached) entry(resource string) *entry {
	if v, ok := c.entries.Load(resource); ok {
		return v.(*entry)
	}
	// Clone: the caller's string may share a large buffer; the map keeps it.
	v, _ := c.entries.LoadOrStore(strings.Clone(resource), new(entry))
	return v.(*entry)
}

// lookup returns the entry if it exists, without creating it.
func (c *Cached) lookup(resource string) (*entry, bool) {
	v, ok := c.entries.Load(resource)
	if !ok {
		return nil, false
	}
	return v.(*entry), true
}

// enter registers a call; it fails once Close has begun. Without a Store
// there is nothing for Close to wait for, and nothing is counted.
func (c *Cached) enter() error {
	if c.store == nil {
		if c.closed.Load() {
			return ErrClosed
		}
		return nil
	}
	c.closeMu.RLock()
	defer c.closeMu.RUnlock()
	if c.closed.Load() {
		return ErrClosed
	}
	c.inflight.Add(1)
	return nil
}

// leave ends a call that enter registered.
func (c *Cached) leave() {
	if c.store != nil {
		c.inflight.Done()
	}
}

// Do implements Fence.Do. A write under the resource's current epoch takes
// only the shared side of its lock. Every wait ends with ctx. write may call
// the fence for the same resource with the context it was given (or one
// derived from it): such a call joins write's hold and never waits for it,
// and one that would have to raise returns ErrNestedRaise.
func (c *Cached) Do(ctx context.Context, resource string, ep epoch.Epoch, write func(ctx context.Context) error) error {
	if err := ValidateResource(resource); err != nil {
		return err
	}
	if err := c.enter(); err != nil {
		return err
	}
	defer c.leave()
	return c.entry(resource).do(ctx, resource, ep, c.store, write)
}

// Admit implements Fence.Admit.
func (c *Cached) Admit(ctx context.Context, resource string, ep epoch.Epoch) error {
	return c.Do(ctx, resource, ep, nil)
}

// Check implements Fence.Check. It creates no entry for a resource the
// fence has not admitted anything for.
func (c *Cached) Check(ctx context.Context, resource string, ep epoch.Epoch) error {
	h, err := c.Highest(ctx, resource)
	if err != nil {
		return err
	}
	_, err = Decide(resource, h, ep)
	return err
}

// Highest implements Fence.Highest. A resource the fence has not used yet
// is read from the Store without being cached.
func (c *Cached) Highest(ctx context.Context, resource string) (epoch.Epoch, error) {
	if err := ValidateResource(resource); err != nil {
		return epoch.Epoch{}, err
	}
	if err := c.enter(); err != nil {
		return epoch.Epoch{}, err
	}
	defer c.leave()
	if err := ctx.Err(); err != nil {
		return epoch.Epoch{}, err
	}
	if e, ok := c.lookup(resource); ok {
		return e.current(ctx, resource, c.store)
	}
	if c.store == nil {
		return epoch.Epoch{}, nil
	}
	return c.store.Load(ctx, resource)
}

// Waiting returns how many calls wait now to get into resource: for a
// raise, for the writes under the older epoch; for a write, behind a
// queued raise or a load. It is for tests and metrics.
func (c *Cached) Waiting(resource string) int {
	if e, ok := c.lookup(resource); ok {
		return e.g.Waiting()
	}
	return 0
}

// Close marks the fence closed: later calls fail with ErrClosed. With a
// Store it then waits for the calls in progress (their writes included), so
// that the caller may release the store once Close has returned. It does
// not close the Store. Calling it again is harmless.
func (c *Cached) Close() error {
	c.closeMu.Lock()
	c.closed.Store(true)
	c.closeMu.Unlock()
	if c.store != nil {
		c.inflight.Wait()
	}
	return nil
}

// load reads the durable highest into e. Caller holds e.g exclusively.
func (e *entry) load(ctx context.Context, resource string, s Store) error {
	if e.loaded {
		return nil
	}
	if s != nil {
		h, err := s.Load(ctx, resource)
		if err != nil {
			return err
		}
		e.highest = h
	}
	e.loaded = true
	return nil
}

// do is Do on one entry. write may be nil (Admit). A write under the
// current epoch holds only e.g's shared side. A raise takes the exclusive
// side, persists the new highest through s, then turns it into a shared
// hold for its write, with no moment between for another raise.
//
// Every wait ends with ctx. A call nested in a write on this resource (with
// the context the write was given) joins that write's hold rather than
// waiting behind a queued raise, and a nested call that would have to raise
// is refused with ErrNestedRaise rather than waiting for itself. A raise
// that finds, once another raise has ended, that it is no longer needed (a
// second writer of the same new epoch) runs its write beside the first
// instead of waiting for it.
func (e *entry) do(ctx context.Context, resource string, ep epoch.Epoch, s Store, write func(context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for {
		gen, err := e.g.Share(ctx)
		if err != nil {
			return err
		}
		if e.loaded {
			if ep == e.highest {
				// The hot path. Decide(r, h, h) accepts without a raise for
				// any admitted (hence valid) h, so skip re-validating.
				return e.g.Run(ctx, write)
			}
			d, err := Decide(resource, e.highest, ep)
			if err != nil {
				e.g.Unshare()
				return err
			}
			if !d.Raise {
				return e.g.Run(ctx, write)
			}
		}
		e.g.Unshare()
		if e.g.Held(ctx) {
			return nestedRaise(resource, ep)
		}
		ok, err := e.g.Lock(ctx, gen)
		if err != nil {
			return err
		}
		if !ok {
			continue // a raise or load ended meanwhile: decide again
		}
		if err := e.raiseLocked(ctx, resource, ep, s); err != nil {
			e.g.Unlock()
			return err
		}
		if write == nil {
			// Admit: the raise (or the same-epoch check) is all there is.
			e.g.Unlock()
			return nil
		}
		e.g.Downgrade()
		if err := ctx.Err(); err != nil {
			e.g.Unshare()
			return err
		}
		return e.g.Run(ctx, write)
	}
}

// raiseLocked loads e if needed and, if ep is newer than its highest,
// records ep through s; it refuses ep as Decide does. A failed Raise leaves
// e to be loaded again. Caller holds e.g exclusively.
func (e *entry) raiseLocked(ctx context.Context, resource string, ep epoch.Epoch, s Store) error {
	if err := e.load(ctx, resource, s); err != nil {
		return err
	}
	d, err := Decide(resource, e.highest, ep)
	if err != nil || !d.Raise {
		return err
	}
	if s != nil {
		if err := s.Raise(ctx, resource, ep); err != nil {
			e.loaded = false
			return err
		}
	}
	e.highest = ep
	return nil
}

// current returns the highest epoch, loading it first if needed.
func (e *entry) current(ctx context.Context, resource string, s Store) (epoch.Epoch, error) {
	for {
		gen, err := e.g.Share(ctx)
		if err != nil {
			return epoch.Epoch{}, err
		}
		h, loaded := e.highest, e.loaded
		e.g.Unshare()
		if loaded {
			return h, nil
		}
		if e.g.Held(ctx) {
			// Cannot be: a hold on e means e was loaded. Refuse rather
			// than wait for ourselves.
			return epoch.Epoch{}, nestedRaise(resource, epoch.Epoch{})
		}
		ok, err := e.g.Lock(ctx, gen)
		if err != nil {
			return epoch.Epoch{}, err
		}
		if !ok {
			continue
		}
		err = e.load(ctx, resource, s)
		h = e.highest
		e.g.Unlock()
		if err != nil {
			return epoch.Epoch{}, err
		}
		return h, nil
	}
}
