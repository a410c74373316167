package raftlog

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestUnreachablePeerFolded: ten minutes of a leader's errors about one
// stopped follower (heartbeat and appendEntries failures every 300 ms, as
// raft logs them at a 1 s heartbeat) make one WARN when it starts failing,
// one summary a minute, and one INFO with the counts when replication to
// it resumes; every folded error is still there at Debug; another peer is
// followed on its own.
func TestUnreachablePeerFolded(t *testing.T) {
	var b bytes.Buffer
	l := New(slog.New(slog.NewJSONHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug})), "raft").(*logger)
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l.peers.now = func() time.Time { return clock }
	n3 := raft.Server{Suffrage: raft.Voter, ID: "n3", Address: "10.0.0.3:7101"}
	refused := errors.New("dial tcp 10.0.0.3:7101: connect: connection refused")
	const failures = 2000 // 10 minutes at one every 300 ms
	for i := range failures {
		if i%2 == 0 {
			l.Error("failed to heartbeat to", "peer", n3.Address, "backoff time", 500*time.Millisecond, "error", refused)
		} else {
			l.Error("failed to appendEntries to", "peer", n3, "error", refused)
		}
		clock = clock.Add(300 * time.Millisecond)
	}
	l.Error("failed to appendEntries to", "peer", raft.Server{ID: "n2", Address: "10.0.0.2:7101"}, "error", refused)
	l.Info("pipelining replication", "peer", n3)

	var warns, summaries, debug int
	var back map[string]any
	for _, r := range records(t, &b) {
		switch {
		case r["level"] == "WARN" && r["peer"] == "10.0.0.3:7101":
			warns++
			if r["msg"] == "peer still unreachable" {
				summaries++
			}
		case r["level"] == "DEBUG" && (r["msg"] == "failed to heartbeat to" || r["msg"] == "failed to appendEntries to"):
			debug++
		case r["msg"] == "peer reachable again":
			back = r
		}
	}
	// 600 s of failures: the first line, then a summary at 60 s, 120 s, … 540 s.
	if warns != 10 || summaries != 9 {
		t.Errorf("%d WARN lines (%d summaries) for ten minutes of one stopped peer, want 10 (9)", warns, summaries)
	}
	if debug != failures+1 {
		t.Errorf("%d folded errors at Debug, want %d", debug, failures+1)
	}
	if back == nil || back["failures"] != float64(failures) || back["peer-id"] != "n3" || back["level"] != "INFO" {
		t.Errorf("recovery line %v, want INFO peer-id=n3 failures=%d", back, failures)
	}
	if !bytes.Contains(b.Bytes(), []byte(`"msg":"peer unreachable`)) || !bytes.Contains(b.Bytes(), []byte(`"peer":"10.0.0.2:7101"`)) {
		t.Errorf("n2's first failure was not reported on its own:\n%s", b.String())
	}
}

// TestFirstElectionNotWarn: a fresh node's first election and its failed
// vote requests are below Info; a follower that lost a known leader still
// warns.
func TestFirstElectionNotWarn(t *testing.T) {
	var b bytes.Buffer
	l := New(slog.New(slog.NewJSONHandler(&b, nil)), "raft")
	l.Warn("heartbeat timeout reached, starting election", "last-leader-addr", raft.ServerAddress(""), "last-leader-id", raft.ServerID(""))
	l.Error("failed to make requestVote RPC", "target", raft.Server{ID: "n2", Address: "a:1"}, "error", errors.New("connection refused"), "term", 2)
	if b.Len() != 0 {
		t.Fatalf("a fresh node's first election logged at Info or above:\n%s", b.String())
	}
	l.Warn("heartbeat timeout reached, starting election", "last-leader-addr", raft.ServerAddress("a:1"), "last-leader-id", raft.ServerID("n2"))
	if !bytes.Contains(b.Bytes(), []byte(`"level":"WARN"`)) {
		t.Fatalf("a lost leader was not a warning:\n%s", b.String())
	}
}

// TestPeerGrace: with a grace period, an outage shorter than it (a peer
// restarting, a group closing node after node) logs nothing above Debug,
// its end included; one that lasts longer warns once the grace has passed,
// carrying how long and how many, and its end is logged at Info.
func TestPeerGrace(t *testing.T) {
	var b bytes.Buffer
	l := New(slog.New(slog.NewJSONHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug})), "raft").(*logger)
	SetPeerGrace(l, 2*time.Second)
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l.peers.now = func() time.Time { return clock }
	n2 := raft.Server{Suffrage: raft.Voter, ID: "n2", Address: "10.0.0.2:7101"}
	refused := errors.New("connection refused")
	fail := func(d time.Duration) {
		for end := clock.Add(d); clock.Before(end); clock = clock.Add(100 * time.Millisecond) {
			l.Error("failed to heartbeat to", "peer", n2.Address, "error", refused)
		}
	}
	levels := func() map[string]string {
		m := map[string]string{}
		for _, r := range records(t, &b) {
			if msg, _ := r["msg"].(string); strings.HasPrefix(msg, "peer ") {
				m[strings.SplitN(msg, ":", 2)[0]] = r["level"].(string)
			}
		}
		return m
	}
	fail(1900 * time.Millisecond)
	l.Info("pipelining replication", "peer", n2)
	if got := levels(); got["peer unreachable"] != "" || got["peer reachable again"] != "DEBUG" {
		t.Fatalf("a 1.9 s outage with a 2 s grace: %v, want no warning and its end at Debug", got)
	}
	b.Reset()
	fail(3 * time.Second)
	l.Info("pipelining replication", "peer", n2)
	got := levels()
	if got["peer unreachable"] != "WARN" || got["peer reachable again"] != "INFO" {
		t.Fatalf("a 3 s outage with a 2 s grace: %v, want one WARN and its end at Info", got)
	}
	for _, r := range records(t, &b) {
		if strings.HasPrefix(r["msg"].(string), "peer unreachable") && (r["for"] != "2s" || r["failures"] != float64(21)) {
			t.Errorf("warning %v: want for=2s failures=21", r)
		}
	}
}
