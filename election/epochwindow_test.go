package election

import (
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"
)

// TestEpochBuiltFromCheckedTerm: Epoch hands out the term its triple read
// checked, even if raft's term moves on between that check and the return
// (I1 at the instant of a step-down). The window is nanoseconds wide in
// production; here a hook holds Epoch inside it while the leader is cut
// off from every peer until the others elect a leader of a newer term,
// and then reconnected until it has learnt that term. An Epoch that reads CurrentTerm again after
// the check returns that newer term, which this node never won.
func TestEpochBuiltFromCheckedTerm(t *testing.T) {
	c := newCluster(t, 3)
	ld, ep := c.leader()
	c.unwatch(ld) // only this test's own call meets the hook
	r := ld.el.Raft()
	var ran atomic.Bool
	hook := func() {
		if ran.Swap(true) {
			return
		}
		// Cut off, the leader steps down but (raft pre-votes) keeps its
		// term; the others elect a leader of a newer term, and once
		// connected again the old leader learns that term.
		for _, o := range c.nodes {
			if o != ld {
				ld.mem.Disconnect(o.mem)
			}
		}
		waitFor(t, "a leader of a newer term among the others", func() bool {
			for _, o := range c.nodes {
				if o != ld && o.el.Raft().State() == raft.Leader && o.el.Raft().CurrentTerm() > ep.Term {
					return true
				}
			}
			return false
		})
		for _, o := range c.nodes {
			if o != ld {
				ld.mem.Connect(o.mem)
			}
		}
		waitFor(t, "the old leader to learn the newer term", func() bool {
			return r.CurrentTerm() > ep.Term
		})
	}
	ld.el.heldHook.Store(&hook)
	got, err := ld.el.Epoch()
	ld.el.heldHook.Store(nil)
	if !ran.Load() {
		t.Fatalf("Epoch did not reach the hook: %v, %v (the leader lost its epoch before the call)", got, err)
	}
	if err != nil {
		t.Fatalf("Epoch after a triple read that passed: %v", err)
	}
	c.check.epoch("window", ld.id, got)
	if got != ep {
		t.Fatalf("Epoch() = %v, want %v: the epoch was not built from the term checked (raft's term is now %d)", got, ep, r.CurrentTerm())
	}
	if _, err := ld.el.Epoch(); err == nil {
		t.Fatal("Epoch succeeds after the leader was cut off and started a newer election")
	}
}
