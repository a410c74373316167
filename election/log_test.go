package election

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/termfence/termfence/transport"
)

// recordLog collects slog records as parsed JSON.
type recordLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (r *recordLog) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.Write(p)
}

func (r *recordLog) records(t *testing.T) []map[string]any {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(r.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// TestQuietLogs: a healthy three-node cluster on real TCP, every node
// logging through one slog.Logger at Info (the level a service runs at),
// starts, elects and shuts down cleanly, each node in turn with Close. The
// whole log holds no ERROR or WARN record (neither the first election of a
// fresh cluster nor a clean close is a warning), and nothing from raft at
// Info: only the election's own few lines.
func TestQuietLogs(t *testing.T) {
	var rec recordLog
	logger := slog.New(slog.NewJSONHandler(&rec, nil)) // slog's default level: Info
	ids := []string{"q1", "q2", "q3"}
	var trs []transport.Transport
	var boot []Server
	for _, id := range ids {
		tr, err := transport.NewTCP("127.0.0.1:0", "", transport.Config{Logger: logger.With("node", id)})
		if err != nil {
			t.Fatal(err)
		}
		trs = append(trs, tr)
		boot = append(boot, Server{ID: id, Addr: string(tr.LocalAddr())})
	}
	var els []*Election
	for i, tr := range trs {
		el, err := New(Config{
			ID: ids[i], Cluster: testCluster, DataDir: t.TempDir(), Transport: tr, Bootstrap: boot,
			Meta:             "http://" + ids[i] + ".test",
			HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond, LeaderLeaseTimeout: 100 * time.Millisecond,
			Logger: logger.With("node", ids[i]),
		})
		if err != nil {
			t.Fatal(err)
		}
		els = append(els, el)
	}
	waitFor(t, "a leader followed by all", func() bool {
		for _, el := range els {
			if _, err := el.Epoch(); err == nil {
				for _, o := range els {
					if o.Status().LeaderID != el.cfg.ID {
						return false
					}
				}
				return true
			}
		}
		return false
	})
	// Up to here the cluster started and elected: no WARN. Closing the
	// nodes one after another is no outage either: each leader hands over
	// to a voter it still reaches (not to the one that just stopped), and
	// a peer away for less than the grace period is not reported. What
	// raft itself says when the last nodes standing lose their quorum
	// (stepping down, starting an election) is true and stays at WARN, but
	// only from the first Close on.
	started := len(rec.records(t))
	for _, el := range els {
		if err := el.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	quorumLost := map[string]bool{"failed to contact quorum of nodes, stepping down": true, "heartbeat timeout reached, starting election": true}
	own := map[string]bool{"epoch confirmed": true, "epoch withdrawn": true, "closing: handing leadership over": true}
	recs := rec.records(t)
	for i, r := range recs {
		if r["level"] == "ERROR" || (r["level"] == "WARN" && (i < started || !quorumLost[r["msg"].(string)])) {
			t.Errorf("%s on a clean run: %v", r["level"], r)
		} else if r["level"] == "WARN" {
			t.Logf("raft, while the group closed: %v", r)
		}
		if r["level"] == "INFO" && !own[r["msg"].(string)] {
			t.Errorf("INFO chatter: %v", r)
		}
		if r["msg"] == "epoch withdrawn" && (r["cluster"] != testCluster || r["leader"] != r["node"]) {
			t.Errorf("epoch withdrawn without its cluster and leader: %v", r)
		}
	}
	if len(recs) == 0 {
		t.Fatal("nothing was logged: the logger was not used")
	}
}
