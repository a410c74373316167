package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/termfence/termfence/epoch"
)

// This file holds the two ways a node writes to the store under a token —
// a request relayed by POST /write or /role-write, and the -write-every
// and -role-write-every writers — once for the group's epoch and each
// role's grant.

// count records the outcome of one write to the store.
func (m *nodeMetrics) count(a storeAnswer, err error) {
	switch {
	case err != nil:
		m.writeErrors.Inc()
	case a.Accepted():
		m.writesAccepted.Inc()
	case a.Refused():
		m.writesRefused.Inc()
	default:
		m.writeErrors.Inc()
	}
}

// forwardWrite serves a write request under ep, which the caller took
// before it read the body (as the contract says: a node paused while it
// reads or sends stays on the epoch it held when the request arrived,
// exactly like the paused leader in Kleppmann's example): it reads the
// body, sends the write to the store stamped with ep's token, and relays
// the store's answer — never the token. resource maps the resource the
// request names to the one written.
func (n *node) forwardWrite(w http.ResponseWriter, r *http.Request, ep epoch.Epoch, resource func(asked string) string) {
	var req writeRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "node: "+err.Error())
		return
	}
	if n.store == nil {
		writeError(w, http.StatusServiceUnavailable, "node: no -store configured")
		return
	}
	req.Resource = resource(req.Resource)
	tok, err := n.cfg.codec.Sign(ep)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "node: sign epoch: "+err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	a, err := n.store.write(ctx, tok, req)
	n.metrics.count(a, err)
	if err != nil {
		writeError(w, http.StatusBadGateway, "node: "+err.Error())
		return
	}
	// The token stays here: the answer is the store's, without it. A node
	// that handed its signed token to whoever asks would let any client of
	// its API write to the store as this leader, around this node, for as
	// long as the epoch is the newest.
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(a.Status)
	_, _ = w.Write(a.Body)
}

// writer is what a -write-every or -role-write-every writer writes and how
// it logs: what ("write", "role write") and held ("epoch", "grant") name
// them in its log lines.
type writer struct {
	resource   string
	every      time.Duration
	log        *slog.Logger
	what, held string
}

// writeUnder writes a counter to w.resource every w.every under ep, with a
// token signed once, when ep was taken, like Kleppmann's lock holder with
// its token. It stops when ctx ends, at the store's first refusal (409: a
// newer epoch was seen), or once it has learned that its epoch is gone
// (lctx ended) and made one more write with the token it holds, as a
// paused process would (see leadWrites). The write it makes when it learns
// may have been sent before the pause that cost the epoch, and have landed
// before the successor's; the one after it is always late. Writes run
// under ctx, not lctx.
//
// It returns nil in every case but a signing error, so election.Lead and
// LeadRole never resign on its behalf: a refusal stops the writer until
// this node's next epoch or grant.
func (n *node) writeUnder(ctx, lctx context.Context, ep epoch.Epoch, w writer) error {
	tok, err := n.cfg.codec.Sign(ep)
	if err != nil {
		return fmt.Errorf("sign %s: %w", ep, err)
	}
	tick := time.NewTicker(w.every)
	defer tick.Stop()
	lost := false
	for i := 1; ; i++ {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil
		}
		value := fmt.Sprintf("%s@%d#%d", n.cfg.ID, ep.Term, i)
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		a, err := n.store.write(wctx, tok, writeRequest{Resource: w.resource, Value: value})
		cancel()
		if err != nil && ctx.Err() != nil {
			return nil // shutting down: the write was cut off, not failed
		}
		n.metrics.count(a, err)
		switch {
		case err != nil:
			n.storeDown.failed(w.log, w.what+": no answer from the store", "epoch", ep.String(), "error", err)
		case a.Accepted():
			n.storeDown.ok(w.log, w.what+": the store answers again")
			w.log.Debug(w.what+" accepted", "epoch", ep.String(), "value", value)
		case a.Refused():
			n.storeDown.ok(w.log, w.what+": the store answers again")
			// A 409 means the store has seen a newer epoch: a newer leader
			// exists, and Raft is telling this node (or soon will). Stop
			// writing under this epoch but do not resign: if the store
			// remembers terms from an earlier incarnation of the cluster,
			// every leader would be refused, and resigning would only make
			// leadership cycle. 401/403 is misconfiguration (the key).
			w.log.Warn(w.what+" REFUSED by the store: stopping writes under this "+w.held,
				"epoch", ep.String(), "status", a.Status, "reason", a.Reason())
			return nil
		default:
			n.storeDown.failed(w.log, w.what+" failed at the store", "epoch", ep.String(), "status", a.Status, "reason", a.Reason())
		}
		if lost {
			return nil
		}
		if lctx.Err() != nil {
			lost = true
			w.log.Info(w.held+" lost; one last write with the old token, as a paused process would", "epoch", ep.String())
		}
	}
}
