package main

import (
	"context"
	"fmt"
)

// runRestart is the README's third exercise: the lock service restarts. The
// leaders write under a few terms, then the whole cluster stops and starts
// again on the same addresses. With raft-boltdb each node finds its term on
// disk, and the next leader's term is above every term the store saw: its
// write is accepted. With -volatile (in-memory Raft stores) the cluster
// starts from nothing: the term goes back to where a new cluster starts,
// and the store refuses the new, legitimate leader. The counter must live
// in durable consensus storage.
func runRestart(ctx context.Context, e *env) (*summary, error) {
	st, err := e.addStore(ctx, "store", "sqlite", false)
	if err != nil {
		return nil, err
	}
	if err := e.startNodes(); err != nil {
		return nil, err
	}
	mode := "the whole cluster restarts; Raft state in raft-boltdb"
	if e.opts.volatile {
		mode = "the whole cluster restarts; Raft state in memory (-volatile)"
	}
	e.header(mode)

	// Three leaders in turn, each writing under its term.
	var last uint64
	for i := range 3 {
		n, ep, err := e.waitEpoch(ctx, last, nil)
		if err != nil {
			return nil, err
		}
		a, err := e.newActor(n, ep)
		if err != nil {
			return nil, err
		}
		e.tl.say(a.who(), "elected leader of term %d: takes epoch %s", ep.Term, ep)
		ans, err := e.write(ctx, a, st, DefaultResource, fmt.Sprintf("w%d", i+1))
		if err != nil {
			return nil, err
		}
		if !ans.Accepted() {
			return nil, failf("the leader of term %d was refused before any restart: %s", ep.Term, ans.Reason())
		}
		last = ep.Term
		if i < 2 {
			if err := n.el.Resign(ctx); err != nil {
				return nil, fmt.Errorf("resign: %w", err)
			}
			e.tl.say(a.who(), "resigns: Raft hands leadership on")
		}
	}
	ss, err := st.c.status(ctx)
	if err != nil {
		return nil, err
	}
	highestBefore := ss.Highest[DefaultResource]

	// The lock service restarts: every node at once.
	e.closeNodes()
	e.tl.mark(event{Lane: "raft", Kind: evNote, Label: "cluster restart"})
	e.tl.say("raft", "all three nodes stop; the store's highest is %s", highestBefore)
	if err := e.startNodes(); err != nil {
		return nil, err
	}
	if e.opts.volatile {
		e.tl.say("raft", "all three nodes start again with empty in-memory Raft stores: the term counter is gone")
	} else {
		e.tl.say("raft", "all three nodes start again and read their terms back from raft-boltdb")
	}
	n, ep, err := e.waitEpoch(ctx, 0, nil)
	if err != nil {
		return nil, err
	}
	a, err := e.newActor(n, ep)
	if err != nil {
		return nil, err
	}
	e.tl.setLabel(n.id, "new "+n.id)
	e.tl.say(a.who(), "elected leader of term %d after the restart: takes epoch %s", ep.Term, ep)
	ans, err := e.write(ctx, a, st, DefaultResource, "after-restart")
	if err != nil {
		return nil, err
	}
	refused := 0
	if ans.Refused() {
		refused = 1
		e.tl.print("  The store refused a legitimate leader: its term %d went back below the %d the store had seen,", ep.Term, last)
		e.tl.print("  because the nodes kept their term only in memory. The counter must live in durable consensus")
		e.tl.print("  storage (raft-boltdb, fsynced): run without -volatile.")
	} else if ans.Accepted() {
		e.tl.print("  The term survived the restart on disk: %d is above the store's %d, so the new leader writes.", ep.Term, last)
	}
	sum := newSummary("restart").
		add("volatile", e.opts.volatile).
		add("term_before", last).add("term_after", ep.Term).
		add("highest_before", highestBefore).
		add("refused", refused)
	sum.ok = ans.Accepted() && ep.Term > last
	return sum, nil
}
