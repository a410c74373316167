package txretry

import (
	"context"
	"sync/atomic"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// A Do's write runs under a hold that the fence's database session keeps
// (the resource's advisory lock and its row lock, shared). A Do or Admit
// called inside that write, on the same fence and resource, cannot take
// those locks from another session once a raise waits: its turn comes
// after the raise, which waits for the outer write, which waits for it.
// The write's context therefore says what it holds, and such a nested call
// is decided against the outer hold instead (Nested).

type heldKey struct {
	fence    any
	resource string
}

type held struct {
	ep     epoch.Epoch
	active atomic.Bool
}

// withHeld returns ctx marked as holding resource of fence under ep while
// the returned held is active.
func withHeld(ctx context.Context, fence any, resource string, ep epoch.Epoch) (context.Context, *held) {
	h := &held{ep: ep}
	h.active.Store(true)
	return context.WithValue(ctx, heldKey{fence, resource}, h), h
}

// Nested reports whether ctx is the context of a running write of a Do on
// fence and resource (or derived from it), and if so decides ep against
// that write's epoch: nil means ep may run now, under the outer hold, with
// no lock of its own (ep is the held epoch); otherwise the refusal
// (ErrStale, …). A newer epoch than the held one, which would have to wait
// for the outer write, is not nested: ok is false and the caller goes the
// usual way. A context that outlives the write carries no hold.
func Nested(ctx context.Context, fence any, resource string, ep epoch.Epoch) (ok bool, err error) {
	h, _ := ctx.Value(heldKey{fence, resource}).(*held)
	if h == nil || !h.active.Load() {
		return false, nil
	}
	d, err := storageguard.Decide(resource, h.ep, ep)
	if err != nil {
		return true, err
	}
	if d.Raise {
		return false, nil
	}
	return true, nil
}

// NewHeldHold is NewHold for a Do on fence and resource under ep: write's
// context says that it holds the resource, until write returns.
func NewHeldHold[Tx any](ctx context.Context, fence any, resource string, ep epoch.Epoch, write func(context.Context) error) *Hold[Tx] {
	return NewHold[Tx](ctx, func(context.Context) error {
		wctx, h := withHeld(ctx, fence, resource, ep)
		defer h.active.Store(false)
		return write(wctx)
	})
}
