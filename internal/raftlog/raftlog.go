// Package raftlog adapts hashicorp's hclog, the logging interface of
// hashicorp/raft and its transports, onto a log/slog handler, so that
// termfence's packages take a *slog.Logger and raft logs through it.
//
// Guarantees: every hclog call becomes at most one slog record on the
// given handler, with the hclog name as the "logger" attribute and the
// hclog arguments as attributes; levels map Trace→slog.LevelDebug-4,
// Debug→Debug, Warn→Warn, Error→Error, and raft's Info — state-transition
// chatter on a healthy cluster (entering follower state, pipelining
// replication, election won) — to LevelInfo, between Debug and Info, so a
// logger at the usual Info level is quiet while the cluster is healthy.
// Two kinds of raft ERROR are not this node's failure and are logged lower:
// a peer that cannot be reached (replication, heartbeat, vote or snapshot
// RPCs failing: the cluster is built to outlive an unreachable minority, and
// every peer that shuts down cleanly is one) at Warn, and an error that is
// net.ErrClosed or raft.ErrTransportShutdown — a connection or transport
// this process closed, which happens only when it shuts down — at Debug.
// A leader that learns of a newer term ("peer has newer term, stopping
// replication": every leadership transfer, every Close of a leader ends so)
// is a state transition and logged at LevelInfo, and so are a failed vote
// request (one per peer per election; in a fresh cluster's first election
// every peer not started yet fails one), a split vote ("Election timeout
// reached, restarting election"), a vote or pre-vote refused (the voter has
// a leader, or a newer log: a returning node's first try), the leader's
// lease check naming a follower it has not heard from ("failed to contact":
// the outage the folded lines below report; "failed to contact quorum of
// nodes, stepping down" stays a warning), and a follower's "heartbeat timeout
// reached, starting election" when it knew no leader before (a fresh or
// restarted node's first election, not a lost leader), and a removed node's
// "not part of stable configuration, aborting election" (every heartbeat
// timeout while it runs; package election logs the removal once). So is a follower
// catching up with the leader's log ("appendEntries rejected, sending older
// logs", "failed to get previous log" for an entry it does not have yet,
// "previous log term mis-match", "clearing log suffix"): every follower that
// was stopped, paused or behind logs them once or a few times.
//
// A leader's errors about one unreachable follower, repeated every few
// heartbeats for as long as it is away (about 140 lines a minute at a 1 s
// heartbeat), are folded per peer: one WARN "peer unreachable" when it
// starts failing, one WARN "peer still unreachable" summary every
// SummaryEvery while it lasts (with the count of failed RPCs), and one INFO
// "peer reachable again" (with the outage's length and count) when raft
// pipelines replication to it again; each folded error is still logged at
// Debug. hclog arguments named like
// slog's own keys (time, level, msg, source) get a "raft-" prefix. Non-guarantees: hclog's
// SetLevel is ignored (the slog handler decides), and records carry no
// source position.
package raftlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// LevelTrace is the slog level of hclog's Trace.
const LevelTrace = slog.LevelDebug - 4

// LevelInfo is the slog level of hclog's Info: below slog.LevelInfo, above
// slog.LevelDebug (it prints as DEBUG+2).
const LevelInfo = slog.LevelDebug + 2

// Level returns the slog level an hclog level is logged at.
func Level(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return LevelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Info:
		return LevelInfo
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	case hclog.Off:
		return slog.LevelError + 1000
	}
	return slog.LevelDebug
}

// New returns an hclog.Logger named name that logs through l. A nil l
// logs nothing.
func New(l *slog.Logger, name string) hclog.Logger {
	if l == nil {
		l = Discard()
	}
	return &logger{h: l.Handler(), name: name, peers: newPeerLog()}
}

// Discard returns a *slog.Logger that logs nothing.
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

type logger struct {
	h     slog.Handler
	name  string
	args  []any
	peers *peerLog // shared with every logger derived from this one
}

var _ hclog.Logger = (*logger)(nil)

func (g *logger) Log(level hclog.Level, msg string, args ...any) {
	lv := Level(level)
	if level >= hclog.Warn {
		lv = demote(lv, msg, args)
	}
	if g.peers != nil && g.peers.fold(g, lv, msg, args) {
		return
	}
	g.emit(lv, msg, args)
}

// renameReserved returns args with keys named like slog's own prefixed
// "raft-"; the caller's slice stays as it was.
func renameReserved(args []any) []any {
	for i := 0; i+1 < len(args); i += 2 {
		if k, ok := args[i].(string); ok && reserved[k] {
			args = append([]any(nil), args...)
			for j := i; j+1 < len(args); j += 2 {
				if k, ok := args[j].(string); ok && reserved[k] {
					args[j] = "raft-" + k
				}
			}
			break
		}
	}
	return args
}

// reserved are the keys of slog's own attributes.
var reserved = map[string]bool{slog.TimeKey: true, slog.LevelKey: true, slog.MessageKey: true, slog.SourceKey: true}

// peerFailures are raft's ERROR messages about a peer it cannot reach.
var peerFailures = map[string]bool{
	"failed to appendEntries to":              true,
	"failed to heartbeat to":                  true,
	"failed to pipeline appendEntries":        true,
	"failed to start pipeline replication to": true,
	"failed to make requestVote RPC":          true,
	"failed to send snapshot to":              true,
}

// demote returns the level a Warn or Error record is logged at: see the
// package documentation.
func demote(lv slog.Level, msg string, args []any) slog.Level {
	for i := 1; i < len(args); i += 2 {
		if err, ok := args[i].(error); ok && closedHere(err) {
			return slog.LevelDebug
		}
	}
	if msg == "Election timeout reached, restarting election" || strings.HasPrefix(msg, "rejecting vote request") ||
		strings.HasPrefix(msg, "rejecting pre-vote request") {
		// A split vote, a candidate turned away: how elections go.
		return LevelInfo
	}
	if msg == "failed to contact" {
		// The leader's lease check naming a follower it has not heard from
		// (three times per outage): the same outage as the folded
		// replication errors below, which say it once.
		return LevelInfo
	}
	if msg == "not part of stable configuration, aborting election" {
		// A removed node's raft, every heartbeat timeout for as long as it
		// runs: election logs the removal once, at Warn.
		return LevelInfo
	}
	if msg == "failed to make requestVote RPC" {
		// One per peer per election, and during the first election of a
		// fresh cluster every peer not started yet is one.
		return LevelInfo
	}
	if msg == "heartbeat timeout reached, starting election" && lastLeaderUnknown(args) {
		// No leader known before: the first election of a fresh (or
		// restarted) node, not a lost leader.
		return LevelInfo
	}
	if lv >= slog.LevelError && peerFailures[msg] {
		return slog.LevelWarn
	}

	if msg == "peer has newer term, stopping replication" {
		return LevelInfo
	}
	if catchUp(msg, args) {
		return LevelInfo
	}
	return lv
}

// catchUp reports whether a raft warning is log replication finding where
// a follower's log and the leader's meet: the leader's "appendEntries
// rejected, sending older logs", and the follower's "failed to get previous
// log" (an entry it does not have yet: raft.ErrLogNotFound), "previous log
// term mis-match" and "clearing log suffix" (entries of a deposed leader's
// term that were never committed). Each follower that was stopped, paused,
// cut off or simply behind a new leader's first append logs them once or a
// few times as it catches up: how Raft works, not a fault. A "failed to get
// previous log" with any other error (the log store failing) stays a
// warning.
func catchUp(msg string, args []any) bool {
	switch msg {
	case "appendEntries rejected, sending older logs", "previous log term mis-match", "clearing log suffix":
		return true
	case "failed to get previous log":
		for i := 1; i < len(args); i += 2 {
			if err, ok := args[i].(error); ok {
				return errors.Is(err, raft.ErrLogNotFound)
			}
		}
	}
	return false
}

// lastLeaderUnknown reports whether raft's "heartbeat timeout reached"
// record names no last leader.
func lastLeaderUnknown(args []any) bool {
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k == "last-leader-id" {
			return fmt.Sprint(args[i+1]) == ""
		}
	}
	return false
}

// closedHere reports whether err comes from a connection this process
// closed (or a transport it shut down). Raft's msgpack codec wraps the
// read error in its own type, which offers the cause through Cause() but
// not Unwrap ("msgpack decode error [pos 7]: set tcp …: use of closed
// network connection"): the chain is followed through both.
func closedHere(err error) bool {
	for depth := 0; err != nil && depth < 16; depth++ {
		if errors.Is(err, net.ErrClosed) || errors.Is(err, raft.ErrTransportShutdown) {
			return true
		}
		c, ok := err.(interface{ Cause() error })
		if !ok {
			return false
		}
		err = c.Cause()
	}
	return false
}

func (g *logger) Trace(msg string, args ...any) { g.Log(hclog.Trace, msg, args...) }
func (g *logger) Debug(msg string, args ...any) { g.Log(hclog.Debug, msg, args...) }
func (g *logger) Info(msg string, args ...any)  { g.Log(hclog.Info, msg, args...) }
func (g *logger) Warn(msg string, args ...any)  { g.Log(hclog.Warn, msg, args...) }
func (g *logger) Error(msg string, args ...any) { g.Log(hclog.Error, msg, args...) }

func (g *logger) enabled(l hclog.Level) bool { return g.h.Enabled(context.Background(), Level(l)) }

func (g *logger) IsTrace() bool { return g.enabled(hclog.Trace) }
func (g *logger) IsDebug() bool { return g.enabled(hclog.Debug) }
func (g *logger) IsInfo() bool  { return g.enabled(hclog.Info) }
func (g *logger) IsWarn() bool  { return g.enabled(hclog.Warn) }
func (g *logger) IsError() bool { return g.enabled(hclog.Error) }

func (g *logger) ImpliedArgs() []any { return g.args }

func (g *logger) With(args ...any) hclog.Logger {
	r := slog.NewRecord(time.Time{}, 0, "", 0)
	r.Add(args...)
	attrs := make([]slog.Attr, 0, r.NumAttrs())
	r.Attrs(func(a slog.Attr) bool { attrs = append(attrs, a); return true })
	return &logger{h: g.h.WithAttrs(attrs), name: g.name, args: append(append([]any(nil), g.args...), args...), peers: g.peers}
}

func (g *logger) Name() string { return g.name }

func (g *logger) Named(name string) hclog.Logger {
	if g.name != "" {
		name = g.name + "." + name
	}
	return &logger{h: g.h, name: name, args: g.args, peers: g.peers}
}

func (g *logger) ResetNamed(name string) hclog.Logger {
	return &logger{h: g.h, name: name, args: g.args, peers: g.peers}
}

// SetLevel is ignored: the slog handler decides what is logged.
func (g *logger) SetLevel(hclog.Level) {}

func (g *logger) GetLevel() hclog.Level {
	for _, l := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if g.enabled(l) {
			return l
		}
	}
	return hclog.Off
}

func (g *logger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(g.StandardWriter(opts), "", 0)
}

func (g *logger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	w := &writer{g: g, level: hclog.Info}
	if opts != nil {
		w.infer = opts.InferLevels || opts.InferLevelsWithTimestamp
		if opts.ForceLevel != hclog.NoLevel {
			w.level = opts.ForceLevel
		}
	}
	return w
}

// writer logs each line written to it, at the level its "[LEVEL]" prefix
// names when infer is set.
type writer struct {
	g     *logger
	level hclog.Level
	infer bool
}

func (w *writer) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(bytes.TrimRight(p, "\n"), []byte("\n")) {
		s, l := string(line), w.level
		if w.infer {
			for _, c := range []struct {
				tag string
				l   hclog.Level
			}{{"[TRACE]", hclog.Trace}, {"[DEBUG]", hclog.Debug}, {"[INFO]", hclog.Info}, {"[WARN]", hclog.Warn}, {"[ERR]", hclog.Error}, {"[ERROR]", hclog.Error}} {
				if i := strings.Index(s, c.tag); i >= 0 {
					s, l = strings.TrimSpace(s[i+len(c.tag):]), c.l
					break
				}
			}
		}
		w.g.Log(l, s)
	}
	return len(p), nil
}
