package election

import (
	"context"
	"fmt"

	"github.com/termfence/termfence/epoch"
)

// Lead runs fn each time this node holds a newly confirmed epoch, and
// blocks until ctx ends (it then returns ctx.Err()) or the Election closes
// (ErrClosed). A node removed from the cluster holds no epoch, so fn does
// not run while it is removed; Lead keeps waiting (and logs the removal
// once), and runs fn again when the node, added back, next leads: an
// application's leader work resumes with the membership, without a
// restart. Watch Removed (or Leadership.Removed) to retire a removed node.
//
// fn is called with the epoch and a context that is cancelled as soon as
// this node is seen to lose that epoch (it stepped down, was deposed or
// partitioned away, or raft shut down), when ctx ends, or when the Election
// closes. Calls never overlap: Lead waits for fn to return before it looks
// for the next epoch, and runs fn at most once per epoch. fn is never
// started with an epoch this node does not hold at that moment (Lead
// re-checks with Epoch just before the call).
//
// If fn returns nil, Lead waits for this node's next epoch. If fn returns an
// error while this node still holds the epoch, Lead logs the error and
// resigns (see Resign), so that another node can take over; if there is no
// other voter to hand over to, the node keeps leading without fn until it
// next wins an election.
//
// fn must stop touching the resource when its context ends. But the
// cancellation is a best-effort notice that arrives after the fact — a
// paused or partitioned process cannot learn of its own deposition in time
// — so a write fn already started, or starts late, is made harmless only by
// the fence: send the epoch (or Token) with every write to a resource that
// keeps the highest epoch it has seen (package storageguard), and treat its
// refusal as "you are no longer leader".
func (e *Election) Lead(ctx context.Context, fn func(ctx context.Context, ep epoch.Epoch) error) error {
	if e.closed.Load() {
		return ErrClosed
	}
	if fn == nil {
		return fmt.Errorf("%w: Lead needs a non-nil fn", ErrInvalidArgument)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	updates := e.Observe(ctx)
	var last uint64 // term of the last epoch fn ran with
	removed := false
	for {
		l, ok := <-updates
		if !ok {
			if err := ctx.Err(); err != nil {
				return err
			}
			return ErrClosed
		}
		if l.Removed != removed {
			removed = l.Removed
			if removed {
				e.log.Info("lead: waiting: this node is no longer a member, until it is added back")
			} else {
				e.log.Info("lead: this node is a member again")
			}
		}
		if !l.Leading() || l.Epoch.Term <= last {
			continue
		}
		ep, err := e.Epoch()
		if err != nil || ep != l.Epoch {
			continue // already gone; a newer Leadership is on its way
		}
		last = ep.Term
		e.runTerm(ctx, ep, fn)
	}
}

// runTerm runs fn for one epoch under a context cancelled when the epoch is
// lost, and resigns if fn fails while the epoch still holds.
func (e *Election) runTerm(ctx context.Context, ep epoch.Epoch, fn func(context.Context, epoch.Epoch) error) {
	lctx, cancel := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		defer cancel()
		// The first value is the current Leadership; every change follows.
		// The channel closes when lctx ends or the Election closes.
		for l := range e.Observe(lctx) {
			if l.Epoch != ep {
				return
			}
		}
	}()
	err := fn(lctx, ep)
	cancel()
	<-watched
	if err == nil {
		return
	}
	if cur, cerr := e.Epoch(); cerr != nil || cur != ep {
		e.log.Info("lead: fn returned an error after its epoch ended", "term", ep.Term, "error", err)
		return
	}
	e.log.Warn("lead: fn failed while leading; resigning", "term", ep.Term, "error", err)
	if rerr := e.Resign(ctx); rerr != nil {
		e.log.Error("lead: resign after fn failure failed", "term", ep.Term, "error", rerr)
	}
}
