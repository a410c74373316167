package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/termfence/termfence/epoch"
)

// pauseScript is the README's skeleton, which most scenarios share: the first
// node to take an epoch plays A; A works, then pauses (its work freezes and
// its Raft node is cut off by transport.Faulty); the node Raft elects next
// plays B and works; A wakes, still believing it leads, and goes on with the
// token it took before the pause. The scenario fills in the work.
type pauseScript struct {
	// before runs as A right after it took its epoch, before the pause.
	before func(ctx context.Context, a *actor) error
	// short, if set, is a pause shorter than the lease: no successor is
	// awaited (asB is not used) and A resumes after it.
	short time.Duration
	// asB runs as the successor while A is paused (long pause only).
	asB func(ctx context.Context, b *actor) error
	// after runs as A when it wakes.
	after func(ctx context.Context, a *actor) error
}

// actorResult is an actor, or why there is none.
type actorResult struct {
	act *actor
	err error
}

// scriptRun is what happened.
type scriptRun struct {
	a, b      *actor
	pause     time.Duration
	elections uint64 // terms started after A's, as the nodes' Raft saw them
}

// runScript plays the script on the env's nodes. Roles are assigned from
// the nodes' own Epoch calls: A is the first node to hold an epoch, B the
// first other node to hold a newer one once A's pause has begun (even one
// that load made win an election early).
func (e *env) runScript(ctx context.Context, s pauseScript) (*scriptRun, error) {
	paused := make(chan actorResult, 1)
	resume := make(chan struct{})
	aDone := make(chan error, 1)
	var work sync.WaitGroup
	defer work.Wait()
	aNode, epA, err := e.waitEpoch(ctx, 0, nil)
	if err != nil {
		return nil, err
	}
	aNode.role = "A"
	work.Add(1)
	go func() {
		defer work.Done()
		e.playA(ctx, aNode, epA, s, paused, resume, aDone)
	}()
	// If the run ends early, A's work must not stay frozen.
	resumed := false
	defer func() {
		if !resumed {
			close(resume)
		}
	}()

	var run scriptRun
	select {
	case r := <-paused:
		if r.err != nil {
			return nil, r.err
		}
		run.a = r.act
	case <-ctx.Done():
		return nil, fmt.Errorf("the work of A never reached its pause: %w", ctx.Err())
	}
	a := run.a
	var others []*demoNode
	for _, n := range e.nodes {
		if n != a.n {
			others = append(others, n)
		}
	}

	// The pause: A's work is already frozen; now its Raft node is cut off.
	pauseStart := time.Now()
	endPause := e.tl.begin(a.n.id, spanPause, a.ep.Term, "pause")
	a.n.faulty.Isolate()
	e.tl.say(a.who(), "stop-the-world pause begins: its work freezes; its Raft node is cut off (Faulty.Isolate)")
	// Like client 2 in Kleppmann's example, another node asks for an epoch while A's
	// lease is live: refused.
	if _, err := others[len(others)-1].el.Epoch(); err != nil {
		e.tl.say(others[len(others)-1].id, "asks for an epoch: refused, %v; A's lease is still live", err)
	}

	if s.short > 0 {
		t := time.NewTimer(s.short) // the injected pause's length
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	} else {
		// A's Raft node notices it has no quorum and steps down; its work,
		// frozen, does not know.
		if err := waitFor(ctx, func() bool { cur, err := a.n.el.Epoch(); return err != nil || cur != a.ep }); err != nil {
			return nil, fmt.Errorf("the Raft node of A never stepped down: %w", err)
		}
		e.tl.say("raft", "%s hears from no quorum within its lease (%v): it steps down; A does not know", a.n.id, e.lease())
		bNode, epB, err := e.waitEpoch(ctx, a.ep.Term, a.n)
		if err != nil {
			return nil, err
		}
		bNode.role = "B"
		b, err := e.newActor(bNode, epB)
		if err != nil {
			return nil, err
		}
		e.tl.setLabel(bNode.id, "B "+bNode.id)
		e.holdEpoch(ctx, b)
		e.tl.say(b.who(), "elected leader of term %d: takes epoch %s", epB.Term, epB)
		if s.asB != nil {
			if err := s.asB(ctx, b); err != nil {
				return nil, fmt.Errorf("the new leader's work: %w", err)
			}
		}
		run.b = b
	}

	// A wakes up.
	a.n.faulty.Heal()
	run.pause = time.Since(pauseStart)
	endPause()
	e.tl.say(a.who(), "pause ends after %dms (lease %v): its Raft node is reachable again", run.pause.Milliseconds(), e.lease())
	resumed = true
	close(resume)
	select {
	case err := <-aDone:
		if err != nil {
			return nil, fmt.Errorf("the work of A after the pause: %w", err)
		}
	case <-ctx.Done():
		return nil, fmt.Errorf("the work of A never finished: %w", ctx.Err())
	}
	if t := e.maxTerm(); t > a.ep.Term {
		run.elections = t - a.ep.Term
	}
	return &run, nil
}

// playA is A's part: take the token once, work, check, freeze, wake, work.
func (e *env) playA(ctx context.Context, n *demoNode, ep epoch.Epoch, s pauseScript, paused chan<- actorResult, resume <-chan struct{}, done chan<- error) {
	a, err := e.newActor(n, ep)
	if err != nil {
		paused <- actorResult{nil, err}
		return
	}
	e.tl.setLabel(n.id, "A "+n.id)
	e.holdEpoch(ctx, a)
	e.tl.say(a.who(), "elected leader of term %d: takes epoch %s (its token: the term, signed)", ep.Term, ep)
	if s.before != nil {
		if err := s.before(ctx, a); err != nil {
			paused <- actorResult{nil, err}
			return
		}
	}
	if cur, err := n.el.Epoch(); err == nil && cur == ep {
		e.tl.say(a.who(), "checks Epoch(): still %s, safe to go on", cur)
	}
	paused <- actorResult{a, nil}
	<-resume // frozen
	e.tl.say(a.who(), "wakes; A still believes it leads and goes on with the token it took before the pause (%s)", ep)
	if s.after != nil {
		done <- s.after(ctx, a)
		return
	}
	done <- nil
}
