package election

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/internal/raftlog"
	"github.com/termfence/termfence/transport"
)

// TestStoppedVoterLogLines counts the lines one stopped voter makes the
// others log. raft's leader fails a heartbeat and an appendEntries to it
// every few heartbeats: about 140 WARN lines a minute at the example's 1 s
// heartbeat before they were folded. Now a node logs one WARN line about
// it when it starts failing plus one summary per raftlog.SummaryEvery, and
// the leader one INFO line with the counts when the voter is back.
func TestStoppedVoterLogLines(t *testing.T) {
	var rec recordLog
	logger := slog.New(slog.NewJSONHandler(&rec, nil)) // Info, as a service runs
	ids := []string{"v1", "v2", "v3"}
	var boot []Server
	var trs []transport.Transport
	for _, id := range ids {
		tr, err := transport.NewTCP("127.0.0.1:0", "", transport.Config{Logger: logger.With("node", id)})
		if err != nil {
			t.Fatal(err)
		}
		trs = append(trs, tr)
		boot = append(boot, Server{ID: id, Addr: string(tr.LocalAddr())})
	}
	dirs := map[string]string{}
	cfgOf := func(i int, tr transport.Transport) Config {
		if dirs[ids[i]] == "" {
			dirs[ids[i]] = t.TempDir()
		}
		return Config{
			ID: ids[i], Cluster: testCluster, DataDir: dirs[ids[i]], Transport: tr, Bootstrap: boot,
			HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond, LeaderLeaseTimeout: 50 * time.Millisecond,
			Logger: logger.With("node", ids[i]),
		}
	}
	els := make([]*Election, len(ids))
	for i, tr := range trs {
		el, err := New(cfgOf(i, tr))
		if err != nil {
			t.Fatal(err)
		}
		els[i] = el
		defer func() { _ = els[i].Close() }()
	}
	var ld *Election
	waitFor(t, "a leader", func() bool {
		for _, el := range els {
			if _, err := el.Epoch(); err == nil {
				ld = el
				return true
			}
		}
		return false
	})
	stop := 0
	for stop < len(els) && els[stop] == ld {
		stop++
	}
	stopped := ids[stop]
	// Failed heartbeats to the stopped voter, from whichever node leads.
	failed := make(chan raft.Observation, 64)
	for i, el := range els {
		if i == stop {
			continue
		}
		obs := raft.NewObserver(failed, false, func(o *raft.Observation) bool {
			h, ok := o.Data.(raft.FailedHeartbeatObservation)
			return ok && string(h.PeerID) == stopped
		})
		el.Raft().RegisterObserver(obs)
		defer el.Raft().DeregisterObserver(obs)
	}

	start := time.Now()
	if err := els[stop].Close(); err != nil {
		t.Fatal(err)
	}
	// 60 failed heartbeats to the stopped voter (what half a minute brings
	// at a 1 s heartbeat): an event to wait for, however slow the machine.
	deadline := time.After(20 * waitLong)
	for n := 0; n < 60; {
		select {
		case <-failed:
			n++
		case <-deadline:
			t.Fatalf("only %d failed heartbeats to %s observed", n, stopped)
		}
	}
	// Back on the same address and data.
	tr, err := transport.NewTCP(boot[stop].Addr, "", transport.Config{Logger: logger.With("node", stopped)})
	if err != nil {
		t.Fatal(err)
	}
	if els[stop], err = New(cfgOf(stop, tr)); err != nil {
		_ = tr.Close()
		t.Fatal(err)
	}
	waitForUpTo(t, 3*waitLong, "a leader to log that "+stopped+" is reachable again", func() bool {
		return len(lines(t, &rec, "peer reachable again", boot[stop].Addr)) > 0
	})
	elapsed := time.Since(start)

	limit := 1 + int(elapsed/raftlog.SummaryEvery) // one when it starts, one summary per period
	var warns []map[string]any
	for _, r := range rec.records(t) {
		if r["level"] == "WARN" || r["level"] == "ERROR" {
			warns = append(warns, r)
		}
	}
	// Lines about the stopped voter: those naming it. (On a loaded machine
	// leadership may move meanwhile, with warnings of its own; a node that
	// leads again while the voter is still away does not warn again.)
	for _, id := range ids {
		n := 0
		for _, r := range warns {
			if r["node"] == id && (r["peer"] == boot[stop].Addr || r["server-id"] == stopped || r["peer-id"] == stopped) {
				n++
			}
		}
		if id != stopped && n > limit {
			t.Errorf("%s logged %d WARN lines about %s in %v, want at most %d: %v", id, n, stopped, elapsed.Round(time.Millisecond), limit, warns)
		}
	}
	// The leader's recovery line counts the RPCs that failed while it led
	// (on a loaded machine leadership may have moved meanwhile).
	back := lines(t, &rec, "peer reachable again", boot[stop].Addr)
	if f, _ := back[0]["failures"].(float64); f < 1 || back[0]["level"] != "INFO" {
		t.Errorf("recovery line %v: want INFO with the count of failures", back[0])
	}
	t.Logf("%s stopped for %v: %d WARN lines in all, recovery: %v", stopped, elapsed.Round(time.Millisecond), len(warns), back[0])
}

// lines returns the records whose message starts with msg and that name
// peer.
func lines(t *testing.T, rec *recordLog, msg, peer string) []map[string]any {
	var out []map[string]any
	for _, r := range rec.records(t) {
		if m, _ := r["msg"].(string); strings.HasPrefix(m, msg) && r["peer"] == peer {
			out = append(out, r)
		}
	}
	return out
}
