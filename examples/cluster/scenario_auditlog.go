package main

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/termfence/termfence/epoch"
)

// auditLog is a second resource that checks no token: an append-only log
// both leaders write to, as the README's second exercise has it. It accepts
// every entry in the order they arrive.
type auditLog struct {
	mu      sync.Mutex
	entries []auditEntry
}

type auditEntry struct {
	by   epoch.Epoch
	text string
}

func (l *auditLog) append(by epoch.Epoch, text string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, auditEntry{by, text})
	return len(l.entries)
}

// runAuditLog: A and B each log a write to the audit log, then make it at
// the fenced store. After its pause A logs its write and the store refuses
// it: the store is right, and the log records a write by term A after one
// by term B that never happened. The log lies.
func runAuditLog(ctx context.Context, e *env) (*summary, error) {
	st, err := e.addStore(ctx, "store", "sqlite", false)
	if err != nil {
		return nil, err
	}
	e.tl.addResource("audit")
	if err := e.startNodes(); err != nil {
		return nil, err
	}
	e.header("a fenced store and an audit log that checks no token")
	log := &auditLog{}
	logged := func(ctx context.Context, a *actor, value string) error {
		n := log.append(a.ep, fmt.Sprintf("%s wrote %s", a.n.id, data(value)))
		e.tl.mark(event{Lane: a.n.id, To: "audit", Kind: evAccepted, Term: a.ep.Term, Label: fmt.Sprintf("audit #%d t%d", n, a.ep.Term)})
		e.tl.say(a.who(), "appends to the audit log: #%d %q (term %d) -> accepted, the log checks nothing", n, log.entries[n-1].text, a.ep.Term)
		_, err := e.write(ctx, a, st, DefaultResource, value)
		return err
	}
	var snap string
	run, err := e.runScript(ctx, pauseScript{
		before: func(ctx context.Context, a *actor) error {
			if err := logged(ctx, a, "v0"); err != nil {
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
			return logged(ctx, b, v+" B")
		},
		after: func(ctx context.Context, a *actor) error { return logged(ctx, a, snap+" A") },
	})
	if err != nil {
		return nil, err
	}
	rec, _, err := st.c.read(ctx, DefaultResource)
	if err != nil {
		return nil, err
	}
	ss, err := st.c.status(ctx)
	if err != nil {
		return nil, err
	}
	// An entry is a lie if an earlier entry came from a newer term: its
	// writer had been deposed, and the fenced store refused its write.
	var high uint64
	lies := 0
	e.tl.say("result", "store: data=%s (term %d by %s), refused=%d", data(rec.Value), rec.Term, rec.Leader, ss.Refused)
	e.tl.say("result", "the audit log says:")
	for i, en := range log.entries {
		mark := ""
		if en.by.Term < high {
			lies++
			mark = fmt.Sprintf("   <- after term %d's entry: this write was REFUSED by the store; the log lies", high)
		}
		high = max(high, en.by.Term)
		e.tl.print("             #%d %s (%s)%s", i+1, en.text, en.by, mark)
	}
	lost := 0
	if !strings.Contains(rec.Value, "B") {
		lost = 1
	}
	sum := newSummary("audit-log").
		add("A", run.a.n.id).add("epochA", run.a.ep).add("B", run.b.n.id).add("epochB", run.b.ep).
		add("store_refused", ss.Refused).add("lost", lost).add("data", list(rec.Value)).
		add("audit_entries", len(log.entries)).add("audit_lies", lies)
	sum.ok = lies == 0 && lost == 0
	return sum, nil
}
