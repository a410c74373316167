package election

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/epoch"
)

// holdConfirm holds nd's confirm worker back until the returned release is
// called: from then on the published term stays as it is, whatever raft
// does.
func holdConfirm(nd *node) (release func()) {
	gate := make(chan struct{})
	nd.el.confirmGate.Store(&gate)
	var once sync.Once
	return func() {
		once.Do(func() {
			nd.el.confirmGate.Store(nil)
			close(gate)
			poke(nd.el.workCh)
		})
	}
}

// epochNow calls Epoch between two reads of raft's term and state, and
// fails the test if Epoch succeeded although raft was not leader of the
// epoch's term for the whole call: the term must be the one raft had
// before and after the call, and raft must have been Leader before it.
func epochNow(t *testing.T, nd *node) (uint64, bool) {
	t.Helper()
	r := nd.el.Raft()
	t0, s0 := r.CurrentTerm(), r.State()
	ep, err := nd.el.Epoch()
	t1 := r.CurrentTerm()
	if err != nil {
		if !errors.Is(err, ErrNotLeader) {
			t.Fatalf("Epoch: %v", err)
		}
		return 0, false
	}
	nd.c.check.epoch("stepdown", nd.id, ep)
	if s0 != raft.Leader {
		t.Fatalf("Epoch() = %v after raft's state was already %v (term %d)", ep, s0, t0)
	}
	if ep.Term != t0 || ep.Term != t1 {
		t.Fatalf("Epoch() = %v while raft's term went %d -> %d", ep, t0, t1)
	}
	return ep.Term, true
}

// TestEpochAtStepDown: Epoch does not wait for the confirm worker to notice
// a step-down. With the worker held back (so the published term stays),
// the leader hands leadership away: Epoch fails from the first moment
// raft's state is no longer Leader. Then leadership comes straight back, in
// a newer term, still with the worker held: Epoch fails (the published term
// is not the one raft leads now) until the worker confirms the new term,
// and it never returns another term than the one raft leads at the call.
// held()'s triple read is what makes this so; a held() that trusts the
// published term alone fails here at once.
func TestEpochAtStepDown(t *testing.T) {
	c := newCluster(t, 3)
	// follows reports whether every node but ld follows ld: a TimeoutNow
	// from ld is admitted only by a node that follows it (an earlier
	// attempt's transfer can leave its target a candidate, with no leader).
	follows := func(ld *node) bool {
		for _, nd := range c.nodes {
			if _, id := nd.el.Raft().LeaderWithID(); nd != ld && string(id) != ld.id {
				return false
			}
		}
		return true
	}
	c.quietly("a step-down and a quick win with the confirm worker held", func() error {
		var ld *node
		var ep epoch.Epoch
		waitFor(t, "a leader with an epoch that every node follows", func() bool {
			for _, nd := range c.nodes {
				if e, err := c.epochOf(nd); err == nil {
					ld, ep = nd, e
					return follows(nd)
				}
			}
			return false
		})
		var back *node
		for _, nd := range c.nodes {
			if nd != ld {
				back = nd
				break
			}
		}
		release := holdConfirm(ld)
		defer release()
		if _, ok := epochNow(t, ld); !ok {
			return fmt.Errorf("%s lost its epoch before the test began", ld.id)
		}

		// 1. Step down, by handing leadership to back.
		if err := ld.el.Raft().LeadershipTransferToServer(raft.ServerID(back.id), raft.ServerAddress(back.id)).Error(); err != nil {
			return fmt.Errorf("transfer to %s: %w", back.id, transferErr(err))
		}
		for ld.el.Raft().State() == raft.Leader {
			epochNow(t, ld)
		}
		for range 1000 { // right after the step-down
			if _, ok := epochNow(t, ld); ok {
				t.Fatalf("%s handed out an epoch after stepping down", ld.id)
			}
		}
		if p := ld.el.pubTerm.Load(); p != ep.Term {
			t.Fatalf("test bug: the held worker changed the published term %d to %d", ep.Term, p)
		}

		// 2. Win again at once, in a newer term, the worker still held.
		var term uint64
		waitFor(t, back.id+" to lead", func() bool {
			term = back.el.Raft().CurrentTerm()
			return back.el.Raft().State() == raft.Leader && term > ep.Term
		})
		waitFor(t, "every node to follow "+back.id+", or "+back.id+" to lose its lease", func() bool {
			return follows(back) || back.el.Raft().State() != raft.Leader
		})
		if err := back.el.Raft().LeadershipTransferToServer(raft.ServerID(ld.id), raft.ServerAddress(ld.id)).Error(); err != nil {
			return fmt.Errorf("transfer back to %s: %w", ld.id, transferErr(err))
		}
		waitFor(t, ld.id+" to lead again", func() bool {
			epochNow(t, ld)
			return ld.el.Raft().State() == raft.Leader && ld.el.Raft().CurrentTerm() > term
		})
		for range 1000 {
			if got, ok := epochNow(t, ld); ok {
				t.Fatalf("%s handed out an epoch of term %d that its held worker never confirmed (published: %d)", ld.id, got, ld.el.pubTerm.Load())
			}
		}
		if p := ld.el.pubTerm.Load(); p != ep.Term {
			t.Fatalf("test bug: the held worker changed the published term %d to %d", ep.Term, p)
		}

		// 3. Release the worker: it confirms the term raft leads now.
		release()
		waitFor(t, ld.id+" to confirm its new term", func() bool {
			got, ok := epochNow(t, ld)
			return ok && got > term
		})
		return nil
	})
}

// transferErr marks raft's "leadership transfer timeout" as errSlow: the
// target was made a candidate and did not win within ElectionTimeout.
func transferErr(err error) error {
	if strings.Contains(err.Error(), "leadership transfer timeout") {
		return fmt.Errorf("%w: %w", errSlow, err)
	}
	return err
}
