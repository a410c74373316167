package storageguard

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/termfence/termfence/epoch"
)

// Memory is a Fence that keeps each resource's highest epoch in memory. It is
// not durable: a restarted process has forgotten every epoch, so a deposed
// leader is admitted again. Use it in tests, in front of resources that live
// no longer than the process, or as the in-process half of another fence.
//
// There is no global lock on the hot path: each resource has its own entry
// with a read-write lock. Writes under the resource's current epoch hold the
// read side and run concurrently; a raise takes the write side, so it waits
// for the writes still running under the older epoch, and from then on the
// older epoch is refused.
type Memory struct {
	closed  atomic.Bool
	entries sync.Map // resource string -> *entry
}

var _ Fence = (*Memory)(nil)

// NewMemory returns an empty in-memory fence.
func NewMemory() *Memory { return &Memory{} }

// entry is one resource's in-process state, shared by the fences that keep
// the highest epoch in memory (Memory, and Bolt as a cache of its file).
type entry struct {
	// mu: same-epoch writers hold the read side while their write runs; a
	// raise (or the first load) holds the write side.
	mu      sync.RWMutex
	loaded  bool        // guarded by mu: highest was read from durable storage
	highest epoch.Epoch // guarded by mu
}

// store persists a fence's high-water marks. A nil store is Memory's: nothing
// to load, nothing to persist.
type store interface {
	// load returns the durable highest epoch of resource (zero if none).
	load(resource string) (epoch.Epoch, error)
	// raise durably records ep as the highest epoch of resource; when it
	// returns nil the raise survives a crash.
	raise(resource string, ep epoch.Epoch) error
}

// table is the per-resource map of entries.
type table struct{ m *sync.Map }

func (t table) get(resource string) *entry {
	if v, ok := t.m.Load(resource); ok {
		return v.(*entry)
	}
	// Clone: the caller's string may share a large buffer; the map keeps it.
	v, _ := t.m.LoadOrStore(strings.Clone(resource), new(entry))
	return v.(*entry)
}

// lookup returns the entry if it exists, without creating it.
func (t table) lookup(resource string) (*entry, bool) {
	v, ok := t.m.Load(resource)
	if !ok {
		return nil, false
	}
	return v.(*entry), true
}

// ensureLoaded reads the durable highest into e. Caller holds e.mu for writing.
func (e *entry) ensureLoaded(resource string, s store) error {
	if e.loaded {
		return nil
	}
	if s != nil {
		h, err := s.load(resource)
		if err != nil {
			return err
		}
		e.highest = h
	}
	e.loaded = true
	return nil
}

// do is Fence.Do for the in-memory fences. write may be nil (Admit). The
// fast path, a write under the current epoch, takes only e.mu's read side.
// A raise takes the write side, persists the new highest through s, then
// downgrades (release, re-acquire the read side and decide again: a newer
// raise in between refuses ep, which is what the rule says).
func (e *entry) do(ctx context.Context, resource string, ep epoch.Epoch, s store, write func(context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for {
		e.mu.RLock()
		if e.loaded && ep == e.highest {
			// The hot path. Decide(r, h, h) accepts without a raise for
			// any admitted (hence valid) h, so skip re-validating.
			return e.runLocked(ctx, write)
		}
		if e.loaded {
			d, err := Decide(resource, e.highest, ep)
			if err != nil {
				e.mu.RUnlock()
				return err
			}
			if !d.Raise {
				return e.runLocked(ctx, write)
			}
		}
		e.mu.RUnlock()

		e.mu.Lock()
		if err := e.ensureLoaded(resource, s); err != nil {
			e.mu.Unlock()
			return err
		}
		d, err := Decide(resource, e.highest, ep)
		if err == nil && d.Raise {
			if s != nil {
				err = s.raise(resource, ep)
			}
			if err == nil {
				e.highest = ep
			}
		}
		e.mu.Unlock()
		if err != nil {
			return err
		}
		if write == nil {
			// Admit: the raise (or the same-epoch check) is all there is.
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// runLocked runs write with e.mu read-held and releases it, even if write
// panics.
func (e *entry) runLocked(ctx context.Context, write func(context.Context) error) error {
	defer e.mu.RUnlock()
	if write == nil {
		return nil
	}
	return write(ctx)
}

// check is Fence.Check: refuse ep if stale, never raise.
func (e *entry) check(resource string, ep epoch.Epoch, s store) error {
	h, err := e.current(resource, s)
	if err != nil {
		return err
	}
	_, err = Decide(resource, h, ep)
	return err
}

// current returns the highest epoch, loading it first if needed.
func (e *entry) current(resource string, s store) (epoch.Epoch, error) {
	e.mu.RLock()
	if e.loaded {
		h := e.highest
		e.mu.RUnlock()
		return h, nil
	}
	e.mu.RUnlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.ensureLoaded(resource, s); err != nil {
		return epoch.Epoch{}, err
	}
	return e.highest, nil
}

// Do implements Fence.Do. write must not call the fence for the same
// resource: a raise waiting for write would deadlock with it.
func (m *Memory) Do(ctx context.Context, resource string, ep epoch.Epoch, write func(ctx context.Context) error) error {
	if m.closed.Load() {
		return ErrClosed
	}
	if err := ValidateResource(resource); err != nil {
		return err
	}
	return table{&m.entries}.get(resource).do(ctx, resource, ep, nil, write)
}

// Admit implements Fence.Admit.
func (m *Memory) Admit(ctx context.Context, resource string, ep epoch.Epoch) error {
	return m.Do(ctx, resource, ep, nil)
}

// Check implements Fence.Check. It does not create an entry for an unknown
// resource.
func (m *Memory) Check(ctx context.Context, resource string, ep epoch.Epoch) error {
	if m.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	e, ok := table{&m.entries}.lookup(resource)
	if !ok {
		_, err := Decide(resource, epoch.Epoch{}, ep)
		return err
	}
	return e.check(resource, ep, nil)
}

// Highest implements Fence.Highest.
func (m *Memory) Highest(ctx context.Context, resource string) (epoch.Epoch, error) {
	if m.closed.Load() {
		return epoch.Epoch{}, ErrClosed
	}
	if err := ValidateResource(resource); err != nil {
		return epoch.Epoch{}, err
	}
	if err := ctx.Err(); err != nil {
		return epoch.Epoch{}, err
	}
	e, ok := table{&m.entries}.lookup(resource)
	if !ok {
		return epoch.Epoch{}, nil
	}
	return e.current(resource, nil)
}

// Close implements Fence.Close. Writes already running finish; later calls
// fail with ErrClosed.
func (m *Memory) Close() error {
	m.closed.Store(true)
	return nil
}
