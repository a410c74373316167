package raftlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

func records(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// TestLevelsNamesArgs: hclog levels map onto slog's (raft's Info chatter to
// Debug), names nest into the "logger" attribute, arguments and implied
// arguments become attributes, and a handler at Info drops raft's Info.
func TestLevelsNamesArgs(t *testing.T) {
	var b bytes.Buffer
	l := New(slog.New(slog.NewJSONHandler(&b, &slog.HandlerOptions{Level: LevelTrace})), "election")
	r := l.Named("raft").With("node", "n1")
	r.Trace("t")
	r.Debug("d")
	r.Info("entering follower state", "term", 3)
	r.Warn("w")
	r.Error("e", "error", "boom")
	got := records(t, &b)
	want := []struct{ msg, level string }{{"t", "DEBUG-4"}, {"d", "DEBUG"}, {"entering follower state", "DEBUG+2"}, {"w", "WARN"}, {"e", "ERROR"}}
	if len(got) != len(want) {
		t.Fatalf("got %d records: %v", len(got), got)
	}
	for i, w := range want {
		if got[i]["msg"] != w.msg || got[i]["level"] != w.level || got[i]["logger"] != "election.raft" || got[i]["node"] != "n1" {
			t.Errorf("record %d = %v, want %s at %s from election.raft with node=n1", i, got[i], w.msg, w.level)
		}
	}
	if got[2]["term"] != float64(3) || got[4]["error"] != "boom" {
		t.Errorf("arguments lost: %v %v", got[2], got[4])
	}

	b.Reset()
	quiet := New(slog.New(slog.NewJSONHandler(&b, nil)), "raft") // Info
	quiet.Info("pipelining replication")
	quiet.Debug("x")
	if b.Len() != 0 || quiet.IsInfo() || !quiet.IsWarn() || quiet.GetLevel() != hclog.Warn {
		t.Errorf("an Info handler logged raft's Info: %q (IsInfo %v, GetLevel %v)", b.String(), quiet.IsInfo(), quiet.GetLevel())
	}
	quiet.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}).Print("[ERR] raft: broke")
	if got := records(t, &b); len(got) != 1 || got[0]["level"] != "ERROR" || got[0]["msg"] != "raft: broke" {
		t.Errorf("standard logger: %v", got)
	}
	New(nil, "x").Error("into nothing") // must not panic
}

// TestDemotions: raft's errors about an unreachable peer are warnings
// (folded: see TestUnreachablePeerFolded), an
// error on a connection this process closed is Debug, a real error stays
// ERROR; arguments named like slog's own keys are renamed.
func TestDemotions(t *testing.T) {
	var b bytes.Buffer
	l := New(slog.New(slog.NewJSONHandler(&b, nil)), "raft")
	l.Error("failed to heartbeat to", "peer", "127.0.0.1:1", "error", errors.New("connection refused"))
	l.Error("failed to decode incoming command", "error", fmt.Errorf("read: %w", net.ErrClosed))
	l.Error("failed to decode incoming command", "error", raft.ErrTransportShutdown)
	// What raft's codec returns when the inbound connection is closed under
	// it during shutdown (its error has Cause, not Unwrap).
	var v map[string]any
	decErr := codec.NewDecoder(failingReader{&net.OpError{Op: "set", Net: "tcp", Err: net.ErrClosed}}, &codec.MsgpackHandle{}).Decode(&v)
	if decErr == nil || errors.Is(decErr, net.ErrClosed) {
		t.Fatalf("the codec's error %v: want one that hides net.ErrClosed from errors.Is", decErr)
	}
	l.Error("failed to decode incoming command", "error", decErr)
	l.Error("peer has newer term, stopping replication", "peer", "n2")
	l.Error("failed to append to logs", "error", errors.New("disk full"))
	l.Warn("some warning", "server-id", "n2", "time", time.Second)
	got := records(t, &b)
	if len(got) != 3 || got[0]["level"] != "WARN" || !strings.HasPrefix(got[0]["msg"].(string), "peer unreachable") || got[1]["level"] != "ERROR" || got[1]["msg"] != "failed to append to logs" {
		t.Fatalf("records %v", got)
	}
	if _, ok := got[2]["raft-time"]; !ok || got[2]["time"] == float64(time.Second) {
		t.Errorf("raft's time argument overwrote the record's time: %v", got[2])
	}
}

// failingReader fails every read with err.
type failingReader struct{ err error }

func (f failingReader) Read([]byte) (int, error) { return 0, f.err }

// TestLogCatchUpNotWarn: log replication finding where a follower's log
// meets the leader's — what every follower that was stopped, paused or
// behind logs as it catches up, on a healthy cluster — is logged below Info,
// with raft's messages and arguments as hashicorp/raft v1.7.2 logs them
// (seen at WARN in the example cluster's walkthrough, once per node coming
// back); the same follower message with an error other than "log not
// found" (the log store failing) stays a warning.
func TestLogCatchUpNotWarn(t *testing.T) {
	var b bytes.Buffer
	l := New(slog.New(slog.NewJSONHandler(&b, &slog.HandlerOptions{Level: LevelInfo})), "raft")
	peer := raft.Server{Suffrage: raft.Voter, ID: "n2", Address: "127.0.0.1:7102"}
	l.Warn("appendEntries rejected, sending older logs", "peer", peer, "next", uint64(13))
	l.Warn("failed to get previous log", "previous-index", uint64(14), "last-index", uint64(12), "error", raft.ErrLogNotFound)
	l.Warn("previous log term mis-match", "ours", uint64(3), "remote", uint64(4))
	l.Warn("clearing log suffix", "from", uint64(13), "to", uint64(14))
	l.Warn("failed to get previous log", "previous-index", uint64(14), "last-index", uint64(12), "error", errors.New("bolt: disk I/O error"))
	got := records(t, &b)
	if len(got) != 5 {
		t.Fatalf("got %d records, want 5: %v", len(got), got)
	}
	for _, r := range got[:4] {
		if r["level"] != "DEBUG+2" {
			t.Errorf("catching up logged at %v, want DEBUG+2 (raft's Info): %v", r["level"], r)
		}
	}
	if got[4]["level"] != "WARN" {
		t.Errorf("a log store failing to read an entry logged at %v, want WARN: %v", got[4]["level"], got[4])
	}
}

// TestRemovedNodeNotWarn: a removed node's raft says it will not campaign
// every heartbeat timeout for as long as it runs; that is logged below
// Info (package election says once, at Warn, that the node was removed).
func TestRemovedNodeNotWarn(t *testing.T) {
	var b bytes.Buffer
	l := New(slog.New(slog.NewJSONHandler(&b, &slog.HandlerOptions{Level: LevelInfo})), "raft")
	l.Warn("not part of stable configuration, aborting election")
	l.Warn("not part of the stable configuration")
	got := records(t, &b)
	if len(got) != 2 {
		t.Fatalf("got %d records, want 2: %v", len(got), got)
	}
	if got[0]["level"] != "DEBUG+2" {
		t.Errorf("a removed node's aborted election logged at %v, want DEBUG+2: %v", got[0]["level"], got[0])
	}
	if got[1]["level"] != "WARN" {
		t.Errorf("another warning logged at %v, want WARN: %v", got[1]["level"], got[1])
	}
}
