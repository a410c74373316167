package raftlog

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// SummaryEvery is how often, while a peer stays unreachable, one summary
// line is logged for it; between lines raft's own errors about it go to
// Debug.
const SummaryEvery = time.Minute

// replicationFailures are raft's ERROR messages of a leader that cannot
// reach a follower. They repeat every few heartbeats for as long as the
// follower is away: they are folded into three lines per outage (see
// peerLog).
var replicationFailures = map[string]bool{
	"failed to appendEntries to":              true,
	"failed to heartbeat to":                  true,
	"failed to pipeline appendEntries":        true,
	"failed to start pipeline replication to": true,
	"failed to send snapshot to":              true,
}

// peerRecovered is raft's Info of a leader whose replication to a follower
// works again.
const peerRecovered = "pipelining replication"

// peerLog folds a leader's repeated errors about one unreachable follower
// into a WARN line once it has been failing for the grace period ("peer
// unreachable"), one WARN summary per SummaryEvery while it lasts ("peer
// still unreachable", with the count of failed RPCs), and, if it warned, an
// INFO line when replication to it works again ("peer reachable again",
// with the outage's length and count). An outage shorter than the grace
// period — a peer that stopped cleanly while the whole group closes, or a
// restart — logs nothing above Debug. Every folded error is still logged,
// at Debug. It is shared by a logger and every logger derived from it
// (Named, With). An outage outlives this node's stint as leader: a node
// that leads again while the peer is still away does not warn again.
type peerLog struct {
	every time.Duration
	grace time.Duration // see SetPeerGrace; 0: warn at the first failure
	now   func() time.Time

	mu    sync.Mutex
	peers map[string]*outage
}

type outage struct {
	id        string
	warned    bool // the "peer unreachable" line was logged
	since     time.Time
	lastLine  time.Time
	failures  int // failed RPCs since since
	sinceLine int // failed RPCs since lastLine
}

func newPeerLog() *peerLog {
	return &peerLog{every: SummaryEvery, now: time.Now, peers: make(map[string]*outage)}
}

// peerOf returns the address and ID of the peer a raft record names (its
// "peer" or "target" argument: a raft.Server or a raft.ServerAddress).
func peerOf(args []any) (addr, id string) {
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k != "peer" && k != "target" {
			continue
		}
		switch p := args[i+1].(type) {
		case raft.Server:
			return string(p.Address), string(p.ID)
		case *raft.Server:
			if p != nil {
				return string(p.Address), string(p.ID)
			}
		case raft.ServerAddress:
			return string(p), ""
		case string:
			return p, ""
		case fmt.Stringer:
			return p.String(), ""
		}
	}
	return "", ""
}

// errOf returns the record's "error" argument, or nil.
func errOf(args []any) any {
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k == "error" {
			return args[i+1]
		}
	}
	return nil
}

// fold handles a record about a peer: it reports whether it did (the
// caller then logs nothing more), logging what the fold calls for.
func (p *peerLog) fold(g *logger, lv slog.Level, msg string, args []any) bool {
	switch {
	case lv >= slog.LevelWarn && replicationFailures[msg]:
		addr, id := peerOf(args)
		if addr == "" {
			return false
		}
		p.failed(g, addr, id, msg, args)
		return true
	case msg == peerRecovered:
		addr, _ := peerOf(args)
		p.recovered(g, addr)
		return false // raft's own line goes on at its level
	}
	return false
}

func (p *peerLog) failed(g *logger, addr, id, msg string, args []any) {
	now := p.now()
	p.mu.Lock()
	o, known := p.peers[addr]
	if !known {
		o = &outage{id: id, since: now, lastLine: now}
		p.peers[addr] = o
	}
	if o.id == "" {
		o.id = id
	}
	o.failures++
	o.sinceLine++
	grace := p.grace
	first := !o.warned && now.Sub(o.since) >= grace
	summary := o.warned && now.Sub(o.lastLine) >= p.every
	failures, sinceLine, since, pid := o.failures, o.sinceLine, o.since, o.id
	if first {
		o.warned, o.lastLine, o.sinceLine = true, now, 0
	}
	if summary {
		o.lastLine, o.sinceLine = now, 0
	}
	p.mu.Unlock()

	g.emit(slog.LevelDebug, msg, args) // nothing is lost at Debug
	switch {
	case first:
		a := []any{"peer", addr, "peer-id", pid, "raft-msg", msg, "error", errOf(args)}
		if grace > 0 {
			a = append(a, "for", now.Sub(since).Round(time.Millisecond).String(), "failures", failures)
		}
		g.emit(slog.LevelWarn, "peer unreachable: raft cannot replicate to it; repeats are logged at Debug, summarised every "+p.every.String(), a)
	case summary:
		g.emit(slog.LevelWarn, "peer still unreachable",
			[]any{"peer", addr, "peer-id", pid, "for", now.Sub(since).Round(time.Second).String(),
				"failures", failures, "failures-since-last-line", sinceLine, "error", errOf(args)})
	}
}

func (p *peerLog) recovered(g *logger, addr string) {
	if addr == "" {
		return
	}
	now := p.now()
	p.mu.Lock()
	o, ok := p.peers[addr]
	delete(p.peers, addr)
	p.mu.Unlock()
	if !ok {
		return
	}
	lv := slog.LevelInfo
	if !o.warned {
		lv = slog.LevelDebug // a blip that was never reported above Debug
	}
	g.emit(lv, "peer reachable again",
		[]any{"peer", addr, "peer-id", o.id, "after", now.Sub(o.since).Round(time.Millisecond).String(), "failures", o.failures})
}

// emit logs one record at lv through g's handler, as Log does.
func (g *logger) emit(lv slog.Level, msg string, args []any) {
	ctx := context.Background()
	if !g.h.Enabled(ctx, lv) {
		return
	}
	r := slog.NewRecord(time.Now(), lv, msg, 0)
	if g.name != "" {
		r.AddAttrs(slog.String("logger", g.name))
	}
	r.Add(renameReserved(args)...)
	_ = g.h.Handle(ctx, r)
}

// Resumed tells l (a logger from New, or one derived from it) that raft
// reaches the peer with this ID and address again — raft's
// ResumedHeartbeatObservation, which raft does not log — so that an outage
// logged as "peer unreachable" ends with its "peer reachable again" line.
// Other loggers ignore it.
func Resumed(l hclog.Logger, id, addr string) {
	g, ok := l.(*logger)
	if !ok || g.peers == nil {
		return
	}
	if addr == "" {
		g.peers.mu.Lock()
		for a, o := range g.peers.peers {
			if o.id == id {
				addr = a
			}
		}
		g.peers.mu.Unlock()
	}
	g.peers.recovered(g, addr)
}

// SetPeerGrace sets how long a peer must have been failing before l (a
// logger from New, or one derived from it: they share the setting) warns
// that it is unreachable. Other loggers ignore it. package election sets it
// to a few election timeouts, so that a group closing node after node, or a
// node restarting, is not reported as an outage.
func SetPeerGrace(l hclog.Logger, d time.Duration) {
	g, ok := l.(*logger)
	if !ok || g.peers == nil {
		return
	}
	g.peers.mu.Lock()
	g.peers.grace = d
	g.peers.mu.Unlock()
}
