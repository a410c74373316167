package main

import (
	"context"
	"strings"
)

// runEfficiency: a lock for efficiency, not correctness. The leader runs a
// daily job — send the digest e-mail and record it — against an outbox that
// checks no token. A starts the job, pauses; B runs it; A wakes and finishes
// it too. Two holders ran the job: one duplicate e-mail, and the recorded
// digest is the same whoever wrote it, so nothing is corrupt. When an
// overlap costs only a duplicate, the lock needs no fence.
func runEfficiency(ctx context.Context, e *env) (*summary, error) {
	outbox, err := e.addStore(ctx, "outbox", "sqlite", true)
	if err != nil {
		return nil, err
	}
	if err := e.startNodes(); err != nil {
		return nil, err
	}
	e.header("a daily job under an efficiency lock, an outbox that checks no token")
	// The job's result depends only on its input, not on who runs it.
	const digest = "digest-2026-11-01:orders=3"
	runs := 0
	job := func(ctx context.Context, a *actor) error {
		runs++
		if _, err := e.write(ctx, a, outbox, "mail-by-"+a.n.id, digest); err != nil {
			return err
		}
		_, err := e.write(ctx, a, outbox, "digest", digest)
		return err
	}
	run, err := e.runScript(ctx, pauseScript{
		before: func(ctx context.Context, a *actor) error {
			e.tl.say(a.who(), "starts the daily job: computes %s", digest)
			return nil
		},
		asB: func(ctx context.Context, b *actor) error {
			e.tl.say(b.who(), "starts the daily job: no digest recorded yet")
			return job(ctx, b)
		},
		after: job,
	})
	if err != nil {
		return nil, err
	}
	names, err := outbox.st.b.resources(ctx)
	if err != nil {
		return nil, err
	}
	mails := 0
	for _, n := range names {
		if strings.HasPrefix(n, "mail-") {
			mails++
		}
	}
	rec, _, err := outbox.c.read(ctx, "digest")
	if err != nil {
		return nil, err
	}
	corrupt := 0
	if rec.Value != digest {
		corrupt = 1
	}
	e.tl.say("result", "outbox: %d digest e-mails sent (%s); recorded digest %q", mails, strings.Join(names, ", "), rec.Value)
	if mails > 1 && corrupt == 0 {
		e.tl.print("  Two holders ran the job: a duplicate e-mail, and the same digest recorded twice. That is the cost")
		e.tl.print("  of an efficiency lock, and no fence is needed. Had the job moved money or overwritten data that")
		e.tl.print("  the other holder relied on, the overlap would corrupt it: a correctness lock (-scenario paused).")
	}
	dup := 0
	if mails > 1 {
		dup = mails - 1
	}
	sum := newSummary("efficiency").
		add("A", run.a.n.id).add("B", run.b.n.id).
		add("runs", runs).add("mails", mails).add("duplicates", dup).add("corrupt", corrupt)
	sum.ok = corrupt == 0
	return sum, nil
}
