package main

import (
	"context"
)

// runShortPause is the README's first exercise: A pauses for less than its
// lease. Raft elects no one else, A's write after the pause is accepted by a
// fenced and an unfenced store alike, and both end with the same data. Both
// "work" — which proves nothing about safety: the pause was short this
// time; the next one may not be (run -scenario paused).
func runShortPause(ctx context.Context, e *env) (*summary, error) {
	fenced, err := e.addStore(ctx, "fenced", "sqlite", false)
	if err != nil {
		return nil, err
	}
	unfenced, err := e.addStore(ctx, "unfenced", "sqlite", true)
	if err != nil {
		return nil, err
	}
	if err := e.startNodes(); err != nil {
		return nil, err
	}
	e.header("a pause shorter than the lease, a fenced and an unfenced store side by side")
	pause := e.lease() / 5
	run, err := e.runScript(ctx, pauseScript{
		short: pause,
		before: func(ctx context.Context, a *actor) error {
			for _, h := range []*storeHandle{fenced, unfenced} {
				if _, err := e.write(ctx, a, h, DefaultResource, "v0"); err != nil {
					return err
				}
			}
			return nil
		},
		after: func(ctx context.Context, a *actor) error {
			for _, h := range []*storeHandle{fenced, unfenced} {
				if _, err := e.write(ctx, a, h, DefaultResource, "v0 A"); err != nil {
					return err
				}
			}
			return nil
		},
	})
	if err != nil {
		return nil, err
	}
	var vals []string
	var refused []uint64
	for _, h := range []*storeHandle{fenced, unfenced} {
		rec, _, err := h.c.read(ctx, DefaultResource)
		if err != nil {
			return nil, err
		}
		ss, err := h.c.status(ctx)
		if err != nil {
			return nil, err
		}
		vals = append(vals, rec.Value)
		refused = append(refused, ss.Refused)
		e.tl.say("result", "%s: data=%s, refused=%d", h.name, data(rec.Value), ss.Refused)
	}
	same := vals[0] == vals[1]
	if run.elections == 0 && same {
		e.tl.print("  Both stores \"work\": the pause (%dms) ended before the lease (%v) ran out, so Raft elected no one", run.pause.Milliseconds(), e.lease())
		e.tl.print("  else and A's write was still the newest. That proves nothing about safety: nothing bounds the next")
		e.tl.print("  pause. Run -scenario paused for one past the lease, where only the fenced store stays correct.")
	} else {
		e.tl.print("  The machine stalled long enough for %d election(s) during the short pause: see -scenario paused.", run.elections)
	}
	sum := newSummary("short-pause").
		add("A", run.a.n.id).add("epochA", run.a.ep).
		add("pause", ms(run.pause)).add("lease", ms(e.lease())).
		add("elections", run.elections).
		add("fenced_refused", refused[0]).add("unfenced_refused", refused[1]).
		add("fenced", list(vals[0])).
		add("unfenced", list(vals[1])).
		add("same", same)
	sum.ok = same && refused[0] == 0
	return sum, nil
}
