package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/termfence/termfence/storageguard"
)

// runHalfDone: a transfer is two steps, a debit and a credit, written to one
// SQLite database fenced on the resource "account" with sqlfence. Without a
// transaction each step is its own fenced write: A's debit commits, A
// pauses, B makes its whole transfer, and A's credit is refused — the fence
// refused, it did not undo, and A's debit stays behind without its credit.
// With -tx the two steps are one sqlfence Fence.Tx: nothing reaches the
// database until that transaction commits with the fence check inside it,
// so A's late transfer is refused whole and leaves nothing.
func runHalfDone(ctx context.Context, e *env) (*summary, error) {
	h, err := e.addStore(ctx, "bank", "sqlite", false)
	if err != nil {
		return nil, err
	}
	sb, ok := h.st.b.(*sqliteBackend)
	if !ok {
		return nil, failf("half-done needs the sqlite backend")
	}
	if err := e.startNodes(); err != nil {
		return nil, err
	}
	mode := "two-step transfers, each step its own fenced write (no transaction)"
	if e.opts.tx {
		mode = "two-step transfers, both steps in one sqlfence transaction (-tx)"
	}
	e.header(mode)
	const account = "account"
	// step commits the given steps in one fenced transaction on "account".
	step := func(ctx context.Context, a *actor, steps ...string) error {
		err := sb.sf.Tx(ctx, account, a.ep, func(tx *sql.Tx) error {
			for _, s := range steps {
				if err := sb.upsert(ctx, tx, record{Resource: a.n.id + "-" + s, Value: s + " by " + a.n.id, Epoch: a.ep}); err != nil {
					return err
				}
			}
			return nil
		})
		what := strings.Join(steps, "+")
		switch {
		case err == nil:
			e.tl.mark(event{Lane: a.n.id, To: "bank", Kind: evAccepted, Term: a.ep.Term, Label: what + " t" + fmt.Sprint(a.ep.Term)})
			e.tl.say(a.who(), "commits %s -> accepted", what)
		case errors.Is(err, storageguard.ErrStale):
			e.tl.mark(event{Lane: a.n.id, To: "bank", Kind: evRefused, Term: a.ep.Term, Label: what + " t" + fmt.Sprint(a.ep.Term)})
			e.tl.say(a.who(), "commits %s -> REFUSED (%v)", what, err)
			return nil
		default:
			return err
		}
		return nil
	}
	run, err := e.runScript(ctx, pauseScript{
		before: func(ctx context.Context, a *actor) error {
			if e.opts.tx {
				e.tl.say(a.who(), "prepares its transfer: debit, then credit, in one transaction that has not reached the database")
				return nil
			}
			return step(ctx, a, "debit")
		},
		asB: func(ctx context.Context, b *actor) error {
			if e.opts.tx {
				return step(ctx, b, "debit", "credit")
			}
			if err := step(ctx, b, "debit"); err != nil {
				return err
			}
			return step(ctx, b, "credit")
		},
		after: func(ctx context.Context, a *actor) error {
			if e.opts.tx {
				return step(ctx, a, "debit", "credit")
			}
			return step(ctx, a, "credit")
		},
	})
	if err != nil {
		return nil, err
	}
	names, err := sb.resources(ctx)
	if err != nil {
		return nil, err
	}
	has := func(who, s string) bool { return slices.Contains(names, who+"-"+s) }
	aSteps, bSteps := 0, 0
	for _, s := range []string{"debit", "credit"} {
		if has(run.a.n.id, s) {
			aSteps++
		}
		if has(run.b.n.id, s) {
			bSteps++
		}
	}
	halfDone := 0
	if aSteps == 1 {
		halfDone = 1
	}
	e.tl.say("result", "the database holds %s", strings.Join(names, ", "))
	switch {
	case halfDone == 1:
		e.tl.print("  A's debit is there without its credit: the fence refused A's second step, it did not undo the first.")
		e.tl.print("  Make a leader's writes atomic (-tx) or idempotent.")
	case aSteps == 0:
		e.tl.print("  Nothing of A's transfer is there: its two steps were one transaction, checked at the fence as it")
		e.tl.print("  committed. (A transaction held open across the pause would instead hold SQLite's write lock and")
		e.tl.print("  make B wait: keep transactions short, and never pause while holding one — or let the database time it out.)")
	}
	sum := newSummary("half-done").
		add("tx", e.opts.tx).
		add("A", run.a.n.id).add("epochA", run.a.ep).add("B", run.b.n.id).add("epochB", run.b.ep).
		add("a_steps", aSteps).add("b_steps", bSteps).add("half_done", halfDone)
	sum.ok = halfDone == 0 && bSteps == 2
	return sum, nil
}
