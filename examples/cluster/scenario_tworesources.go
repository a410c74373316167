package main

import (
	"context"
)

// runTwoResources: every write of the leaders touches two stores — a
// database that checks the token and an object store that does not. A's
// late write is refused by the one and lands on the other: half refused,
// and the two resources now disagree about what happened.
func runTwoResources(ctx context.Context, e *env) (*summary, error) {
	db, err := e.addStore(ctx, "db", "sqlite", false)
	if err != nil {
		return nil, err
	}
	objects, err := e.addStore(ctx, "objects", "sqlite", true)
	if err != nil {
		return nil, err
	}
	if err := e.startNodes(); err != nil {
		return nil, err
	}
	e.header("one write goes to two stores; only db checks the token")
	both := func(ctx context.Context, a *actor, value string) error {
		for _, h := range []*storeHandle{db, objects} {
			if _, err := e.write(ctx, a, h, DefaultResource, value); err != nil {
				return err
			}
		}
		return nil
	}
	var snap string
	run, err := e.runScript(ctx, pauseScript{
		before: func(ctx context.Context, a *actor) error {
			if err := both(ctx, a, "v0"); err != nil {
				return err
			}
			var err error
			snap, err = e.read(ctx, a, db, DefaultResource)
			return err
		},
		asB: func(ctx context.Context, b *actor) error {
			v, err := e.read(ctx, b, db, DefaultResource)
			if err != nil {
				return err
			}
			return both(ctx, b, v+" B")
		},
		after: func(ctx context.Context, a *actor) error { return both(ctx, a, snap+" A") },
	})
	if err != nil {
		return nil, err
	}
	var recs []readReply
	var refused []uint64
	for _, h := range []*storeHandle{db, objects} {
		rec, _, err := h.c.read(ctx, DefaultResource)
		if err != nil {
			return nil, err
		}
		ss, err := h.c.status(ctx)
		if err != nil {
			return nil, err
		}
		recs, refused = append(recs, rec), append(refused, ss.Refused)
		e.tl.say("result", "%s: data=%s (term %d by %s), refused=%d", h.name, data(rec.Value), rec.Term, rec.Leader, ss.Refused)
	}
	// The object store holds a write made under A's epoch after B wrote.
	staleOnObjects := 0
	if recs[1].Term == run.a.ep.Term && recs[1].Leader == run.a.n.id {
		staleOnObjects = 1
	}
	partial := 0
	if recs[0].Value != recs[1].Value {
		partial = 1
		e.tl.print("  A's late write was refused by db and accepted by objects: half done. Every resource a leader")
		e.tl.print("  writes must check the token, or the stale leader's update lands on the ones that do not.")
	}
	sum := newSummary("two-resources").
		add("A", run.a.n.id).add("epochA", run.a.ep).add("B", run.b.n.id).add("epochB", run.b.ep).
		add("db_refused", refused[0]).add("objects_refused", refused[1]).
		add("objects_stale", staleOnObjects).
		add("db", list(recs[0].Value)).add("objects", list(recs[1].Value)).
		add("partial", partial)
	sum.ok = partial == 0 && staleOnObjects == 0
	return sum, nil
}
