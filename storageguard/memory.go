package storageguard

import (
	"context"

	"github.com/termfence/termfence/epoch"
)

// Memory is a Fence that keeps each resource's highest epoch in memory. It is
// not durable: a restarted process has forgotten every epoch, so a deposed
// leader is admitted again. Use it in tests and in front of resources that
// live no longer than the process.
//
// It is a Cached fence without a Store: there is no global lock on the hot
// path, writes under a resource's current epoch hold the shared side of its
// lock and run concurrently, and a raise takes the exclusive side, so it
// waits for the writes still running under the older epoch; from then on
// the older epoch is refused. Every wait ends with the caller's context.
type Memory struct{ c Cached }

var _ Fence = (*Memory)(nil)

// NewMemory returns an empty in-memory fence.
func NewMemory() *Memory { return &Memory{} }

// Do implements Fence.Do. write may call the fence for the same resource
// with the context it was given (or one derived from it): such a call never
// waits for write, and one that would have to raise returns ErrNestedRaise
// (see Cached.Do).
func (m *Memory) Do(ctx context.Context, resource string, ep epoch.Epoch, write func(ctx context.Context) error) error {
	// Cached.Do without a Store, written out: the hottest path of all,
	// with no call counted for Close to wait for and no frame in between.
	if m.c.closed.Load() {
		return ErrClosed
	}
	if err := ValidateResource(resource); err != nil {
		return err
	}
	return m.c.entry(resource).do(ctx, resource, ep, nil, write)
}

// Admit implements Fence.Admit.
func (m *Memory) Admit(ctx context.Context, resource string, ep epoch.Epoch) error {
	return m.Do(ctx, resource, ep, nil)
}

// Check implements Fence.Check. It does not create an entry for an unknown
// resource.
func (m *Memory) Check(ctx context.Context, resource string, ep epoch.Epoch) error {
	return m.c.Check(ctx, resource, ep)
}

// Highest implements Fence.Highest.
func (m *Memory) Highest(ctx context.Context, resource string) (epoch.Epoch, error) {
	return m.c.Highest(ctx, resource)
}

// Waiting returns how many calls wait now to get into resource (see
// Cached.Waiting).
func (m *Memory) Waiting(resource string) int { return m.c.Waiting(resource) }

// Close implements Fence.Close. Writes already running finish; later calls
// fail with ErrClosed.
func (m *Memory) Close() error { return m.c.Close() }
