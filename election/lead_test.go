package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/termfence/termfence/epoch"
)

type leadRun struct {
	node string
	ep   epoch.Epoch
	held bool // Epoch() returned ep when fn started
}

// leaders runs Lead on every node of c with an fn that reports its start,
// waits for its context to end, reports the end and returns fnErr(run).
type leaders struct {
	runs, ended chan leadRun
	cancel      context.CancelFunc
	wg          sync.WaitGroup
}

func startLead(t *testing.T, c *cluster, fnErr func(leadRun) error) *leaders {
	ctx, cancel := context.WithCancel(context.Background())
	ls := &leaders{runs: make(chan leadRun, 100), ended: make(chan leadRun, 100), cancel: cancel}
	for _, nd := range c.nodes {
		var active atomic.Int32
		ls.wg.Add(1)
		go func() {
			defer ls.wg.Done()
			err := nd.el.Lead(ctx, func(lctx context.Context, ep epoch.Epoch) error {
				if n := active.Add(1); n != 1 {
					t.Errorf("%s: fn running %d times at once", nd.id, n)
				}
				defer active.Add(-1)
				cur, err := nd.el.Epoch()
				r := leadRun{node: nd.id, ep: ep, held: err == nil && cur == ep}
				ls.runs <- r
				if err := fnErr(r); err != nil {
					return err
				}
				<-lctx.Done()
				ls.ended <- r
				return nil
			})
			if !errors.Is(err, context.Canceled) && !errors.Is(err, ErrClosed) {
				t.Errorf("%s: Lead returned %v", nd.id, err)
			}
		}()
	}
	return ls
}

func (ls *leaders) stop() {
	ls.cancel()
	ls.wg.Wait()
}

func next(t *testing.T, ch <-chan leadRun, what string) leadRun {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(waitLong):
		t.Fatalf("timed out waiting for %s", what)
		return leadRun{}
	}
}

// nextMatching returns the first run on ch that match accepts. Runs it
// skips are logged: on a loaded machine raft may elect on its own (see
// disturbances) and start or end other runs in between; what the caller
// checks is that the run it waits for comes at all.
func nextMatching(t *testing.T, ch <-chan leadRun, what string, match func(leadRun) bool) leadRun {
	t.Helper()
	for {
		r := next(t, ch, what)
		if match(r) {
			return r
		}
		t.Logf("waiting for %s, passed %+v", what, r)
	}
}

func TestLeadCancelledOnPartitionRunsAgain(t *testing.T) {
	c := newCluster(t, 3)
	ls := startLead(t, c, func(leadRun) error { return nil })
	defer ls.stop()

	r1 := next(t, ls.runs, "fn to run on the first leader")
	if !r1.held {
		t.Fatalf("fn started with %v, which %s did not hold", r1.ep, r1.node)
	}
	first := c.byID(r1.node)
	first.net.Isolate()
	nextMatching(t, ls.ended, "the partitioned leader's fn context to be cancelled", func(r leadRun) bool { return r == r1 })
	r2 := next(t, ls.runs, "fn to run on the new leader")
	if r2.node == r1.node || r2.ep.Term <= r1.ep.Term || !r2.held {
		t.Fatalf("second run %+v after %+v", r2, r1)
	}
	first.net.Heal()

	// Back to the first node: its fn runs again, with a newer epoch, and
	// the second leader's fn is cancelled.
	c.quietly("TransferTo the first node", func() error {
		ld, ep := c.leader()
		if ld.id == r1.node {
			return nil // raft elected it on its own meanwhile; its run is checked below
		}
		if err := ld.el.TransferTo(context.Background(), r1.node); err != nil {
			return err
		}
		// TransferTo returns once ld no longer leads, which a lost
		// lease also ends: look at who leads now.
		if nw, nep := c.leader(); nw.id != r1.node {
			return fmt.Errorf("after TransferTo(%s) from %v, %v leads", r1.node, ep, nep)
		}
		return nil
	})
	r3 := nextMatching(t, ls.runs, "fn to run again on the first node", func(r leadRun) bool { return r.node == r1.node })
	if r3.ep.Term <= r2.ep.Term || !r3.held {
		t.Fatalf("third run %+v after %+v", r3, r2)
	}
	nextMatching(t, ls.ended, "the second leader's fn context to be cancelled", func(r leadRun) bool { return r == r2 })
}

func TestLeadResignsWhenFnFails(t *testing.T) {
	c := newCluster(t, 3)
	var failed atomic.Bool
	boom := errors.New("boom")
	ls := startLead(t, c, func(leadRun) error {
		if failed.CompareAndSwap(false, true) {
			return boom // the first leader's fn fails at once
		}
		return nil
	})
	defer ls.stop()
	r1 := next(t, ls.runs, "the first fn run")
	r2 := next(t, ls.runs, "fn to run on the node that took over")
	if r2.node == r1.node || r2.ep.Term <= r1.ep.Term {
		t.Fatalf("after fn failed with %v at %v, next run is %+v", boom, r1.ep, r2)
	}
}

func TestLeadEndsOnClose(t *testing.T) {
	c := newCluster(t, 3)
	ld, ep := c.leader()
	started := make(chan struct{})
	cancelled := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- ld.el.Lead(context.Background(), func(ctx context.Context, got epoch.Epoch) error {
			// ep, or a later term of the same node: under load its lease
			// can lapse and it win again before Lead starts.
			if got.Leader != ep.Leader || got.Term < ep.Term {
				t.Errorf("fn got %v, want %v or a later term of %s", got, ep, ep.Leader)
			}
			close(started)
			<-ctx.Done()
			close(cancelled)
			return nil
		})
	}()
	<-started
	c.stop(ld)
	<-cancelled
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Lead after Close: %v, want ErrClosed", err)
	}
	if err := ld.el.Lead(context.Background(), func(context.Context, epoch.Epoch) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Lead on a closed Election: %v, want ErrClosed", err)
	}
	c.leaderAbove(ep.Term, ld)
}
