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
		if !ran.Swap(true) {
			moveTermOn(t, c, ld, ep.Term)
		}
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

// moveTermOn cuts ld off from every peer until the others elect a leader
// of a term above term, then reconnects it until it has learnt that term
// (raft pre-votes, so a node cut off alone keeps its term).
func moveTermOn(t *testing.T, c *cluster, ld *node, term uint64) {
	r := ld.el.Raft()
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
			if o != ld && o.el.Raft().State() == raft.Leader && o.el.Raft().CurrentTerm() > term {
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
		return r.CurrentTerm() > term
	})
}

// TestTripleReadSeesTermChange: the triple read fails if raft's term
// changed between its first and second read of CurrentTerm, even though
// State said Leader in between (I1 at the instant of a step-down). A hook
// holds the read between State and the second CurrentTerm while the term
// moves on; a triple read that does not compare the two terms hands out
// the old epoch although raft left that term.
func TestTripleReadSeesTermChange(t *testing.T) {
	c := newCluster(t, 3)
	ld, ep := c.leader()
	c.unwatch(ld)
	var armed, ran atomic.Bool
	hook := func() {
		if armed.Load() && !ran.Swap(true) {
			moveTermOn(t, c, ld, ep.Term)
		}
	}
	ld.el.tripleHook.Store(&hook)
	armed.Store(true)
	got, err := ld.el.Epoch()
	ld.el.tripleHook.Store(nil)
	if !ran.Load() {
		t.Fatalf("the triple read did not reach the hook: %v, %v", got, err)
	}
	if err == nil {
		c.check.epoch("triple", ld.id, got)
		t.Fatalf("Epoch() = %v although raft's term moved from %d to %d during the triple read", got, ep.Term, ld.el.Raft().CurrentTerm())
	}
}
