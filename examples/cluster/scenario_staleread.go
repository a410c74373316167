package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/termfence/termfence/epoch"
)

// runStaleRead: reads are not fenced. A reads the balance with a fenced read
// (the store's Check passes: A's epoch is the newest), pauses, and B changes
// the balance. A wakes and acts on what it read — stale, though its Check
// passed. The deposed A's plain read is then served like anyone's; only a
// read that carries its token is refused.
func runStaleRead(ctx context.Context, e *env) (*summary, error) {
	st, err := e.addStore(ctx, "store", "sqlite", false)
	if err != nil {
		return nil, err
	}
	if err := e.startNodes(); err != nil {
		return nil, err
	}
	e.header("reads: plain, and Check-ed with the reader's token")
	var (
		aRead                             string
		checkPassed, checkRefused, served int
		staleUsed                         int
	)
	checked := func(ctx context.Context, a *actor) (string, bool, error) {
		rec, ans, err := readChecked(ctx, st.c, a.tok, DefaultResource)
		if err != nil {
			return "", false, err
		}
		if ans.Status == http.StatusOK {
			e.tl.mark(event{Lane: a.n.id, To: st.name, Kind: evRead, Term: a.ep.Term, Label: "checked read " + data(rec.Value)})
			e.tl.say(a.who(), "reads with its token (Check) -> passed, %s", data(rec.Value))
			return rec.Value, true, nil
		}
		e.tl.mark(event{Lane: a.n.id, To: st.name, Kind: evRefused, Term: a.ep.Term, Label: fmt.Sprintf("checked read t%d", a.ep.Term)})
		e.tl.say(a.who(), "reads with its token (Check) -> REFUSED (%d: %s)", ans.Status, ans.Reason())
		return "", false, nil
	}
	run, err := e.runScript(ctx, pauseScript{
		before: func(ctx context.Context, a *actor) error {
			if _, err := e.write(ctx, a, st, DefaultResource, "balance=100"); err != nil {
				return err
			}
			v, ok, err := checked(ctx, a)
			if ok {
				checkPassed++
				aRead = v
			}
			return err
		},
		asB: func(ctx context.Context, b *actor) error {
			_, err := e.write(ctx, b, st, DefaultResource, "balance=40")
			return err
		},
		after: func(ctx context.Context, a *actor) error {
			cur, _, err := st.c.read(ctx, DefaultResource)
			if err != nil {
				return err
			}
			e.tl.mark(event{Lane: a.n.id, Kind: evNote, Term: a.ep.Term, Label: "acts on " + aRead})
			if cur.Value != aRead {
				staleUsed++
				e.tl.say(a.who(), "acts on what it read: sends a statement saying %s — STALE, the store holds %s (term %d)", aRead, cur.Value, cur.Term)
			} else {
				e.tl.say(a.who(), "acts on what it read: %s, still current", aRead)
			}
			if _, err := e.read(ctx, a, st, DefaultResource); err != nil {
				return err
			}
			served++
			_, ok, err := checked(ctx, a)
			if err == nil && !ok {
				checkRefused++
			}
			return err
		},
	})
	if err != nil {
		return nil, err
	}
	e.tl.print("  A's Check passed before the pause and its read was stale by the time A used it: a fenced read")
	e.tl.print("  proves only that no newer epoch had written yet. The plain read of the deposed A was served;")
	e.tl.print("  the one with its token was refused. Only side effects that pass through a fence are protected.")
	sum := newSummary("stale-read").
		add("A", run.a.n.id).add("epochA", run.a.ep).add("B", run.b.n.id).add("epochB", run.b.ep).
		add("check_passed", checkPassed).add("stale_used", staleUsed).
		add("plain_read_served", served).add("check_refused", checkRefused)
	sum.ok = staleUsed == 0
	return sum, nil
}

// readChecked is GET /read with the reader's token: the store checks the
// epoch (no raise) before it answers. On a refusal the answer carries the
// status and body.
func readChecked(ctx context.Context, c *storeClient, token, resource string) (readReply, storeAnswer, error) {
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/read?resource="+url.QueryEscape(resource), nil)
	if err != nil {
		return readReply{}, storeAnswer{}, err
	}
	r.Header.Set(epoch.Header, token)
	resp, err := c.hc.Do(r)
	if err != nil {
		return readReply{}, storeAnswer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return readReply{}, storeAnswer{}, err
	}
	ans := storeAnswer{Status: resp.StatusCode, Body: b}
	var rec readReply
	if ans.Status == http.StatusOK {
		if err := json.Unmarshal(b, &rec); err != nil {
			return readReply{}, ans, err
		}
	}
	return rec, ans, nil
}
