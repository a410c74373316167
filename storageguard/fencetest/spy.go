package fencetest

import (
	"context"
	"sync/atomic"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// Spy wraps a Fence and counts the calls that reach it, for tests of what
// sits in front of a fence (a Guard, a proxy): that a refused token never
// reaches the fence, or that a request waits at the fence.
type Spy struct {
	storageguard.Fence
	// Calls counts Do, Admit and Check: every call that decides on an epoch.
	Calls atomic.Int64
	// Reads counts Highest.
	Reads atomic.Int64
	// OnDecide, if set, is called with each epoch that reaches Do or Admit,
	// before the fence decides on it. Set it before the Spy is shared.
	OnDecide func(epoch.Epoch)
	// OnHold, if set, is called with the epoch of each Do whose write the
	// wrapped fence runs, as the write starts: the epoch is admitted and
	// held. Set it before the Spy is shared.
	OnHold func(epoch.Epoch)
}

var _ storageguard.Fence = (*Spy)(nil)

// Do counts the call and calls OnDecide, then the wrapped fence's Do (with
// OnHold called as the write starts).
func (s *Spy) Do(ctx context.Context, r string, ep epoch.Epoch, w func(context.Context) error) error {
	s.Calls.Add(1)
	if s.OnDecide != nil {
		s.OnDecide(ep)
	}
	if s.OnHold != nil && w != nil {
		write := w
		w = func(ctx context.Context) error {
			s.OnHold(ep)
			return write(ctx)
		}
	}
	return s.Fence.Do(ctx, r, ep, w)
}

// Admit counts the call and calls OnDecide, then the wrapped fence's Admit.
func (s *Spy) Admit(ctx context.Context, r string, ep epoch.Epoch) error {
	s.Calls.Add(1)
	if s.OnDecide != nil {
		s.OnDecide(ep)
	}
	return s.Fence.Admit(ctx, r, ep)
}

// Check counts the call, then calls the wrapped fence's Check.
func (s *Spy) Check(ctx context.Context, r string, ep epoch.Epoch) error {
	s.Calls.Add(1)
	return s.Fence.Check(ctx, r, ep)
}

// Highest counts the read, then calls the wrapped fence's Highest.
func (s *Spy) Highest(ctx context.Context, r string) (epoch.Epoch, error) {
	s.Reads.Add(1)
	return s.Fence.Highest(ctx, r)
}
