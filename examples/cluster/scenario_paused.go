package main

import (
	"context"
	"slices"
	"strings"
)

// runPaused is Kleppmann's run with tokens 33 and 34, the terms real: A takes
// its epoch, writes the initial data and reads it, checks it still leads —
// then pauses past its lease. B is elected in a higher term, reads and
// writes. A wakes and writes with the token it took before the pause. The
// fenced store refuses it and B's update survives; with -unfenced the store
// skips the check and B's update is lost.
func runPaused(ctx context.Context, e *env) (*summary, error) {
	st, err := e.addStore(ctx, "store", e.opts.backend, e.opts.unfenced)
	if err != nil {
		return nil, err
	}
	if err := e.startNodes(); err != nil {
		return nil, err
	}
	mode := "storage WITH fencing"
	if e.opts.unfenced {
		mode = "storage WITHOUT fencing (-unfenced: the store skips the epoch check)"
	}
	e.header(mode)

	var snap string
	run, err := e.runScript(ctx, pauseScript{
		before: func(ctx context.Context, a *actor) error {
			if _, err := e.write(ctx, a, st, DefaultResource, "v0"); err != nil {
				return err
			}
			snap, err = e.read(ctx, a, st, DefaultResource)
			return err
		},
		asB: func(ctx context.Context, b *actor) error {
			v, err := e.read(ctx, b, st, DefaultResource)
			if err != nil {
				return err
			}
			ans, err := e.write(ctx, b, st, DefaultResource, v+" B")
			if err == nil && !ans.Accepted() {
				return failf("the new leader's write was not accepted: %d %s", ans.Status, ans.Reason())
			}
			return err
		},
		after: func(ctx context.Context, a *actor) error {
			_, err := e.write(ctx, a, st, DefaultResource, snap+" A")
			return err
		},
	})
	if err != nil {
		return nil, err
	}

	rec, ok, err := st.c.read(ctx, DefaultResource)
	if err != nil || !ok {
		return nil, failf("reading the final data: ok=%v %v", ok, err)
	}
	ss, err := st.c.status(ctx)
	if err != nil {
		return nil, err
	}
	items := strings.Fields(rec.Value)
	lost := 0
	verdict := "B's update survives"
	if !slices.Contains(items, "B") {
		lost = 1
		verdict = "B's update is LOST"
	}
	e.tl.say("result", "data=%s (last written under term %d by %s)  %s", data(rec.Value), rec.Term, rec.Leader, verdict)
	e.tl.say("store", "accepted=%d refused=%d highest=%s", ss.Accepted, ss.Refused, ss.Highest[DefaultResource])
	sum := newSummary("paused").
		add("fenced", !e.opts.unfenced).
		add("A", run.a.n.id).add("epochA", run.a.ep).
		add("B", run.b.n.id).add("epochB", run.b.ep).
		add("pause", ms(run.pause)).add("lease", ms(e.lease())).
		add("refused", ss.Refused).add("lost", lost).
		add("data", list(rec.Value))
	sum.ok = lost == 0
	return sum, nil
}
