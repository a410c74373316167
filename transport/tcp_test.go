package transport

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func newTestTCP(t *testing.T, cfg Config) Transport {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	tr, err := NewTCP("127.0.0.1:0", "", cfg)
	if err != nil {
		t.Fatalf("NewTCP: %v", err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

func TestTCPClusterElects(t *testing.T) {
	nodes := startCluster(t, fast, newTestTCP(t, Config{}), newTestTCP(t, Config{}), newTestTCP(t, Config{}))
	applyOnLeader(t, nodes, []byte("x"))
}

// TestTCPNoPipeline: the TCP transport offers no pipeline (raft v1.7.2's
// can deadlock: see AppendEntriesPipeline), and a cluster on it replicates
// entries one AppendEntries at a time, to every follower.
func TestTCPNoPipeline(t *testing.T) {
	tr := newTestTCP(t, Config{})
	if p, err := tr.AppendEntriesPipeline("n2", "127.0.0.1:1"); !errors.Is(err, raft.ErrPipelineReplicationNotSupported) || p != nil {
		t.Fatalf("AppendEntriesPipeline = %v, %v; want nil, raft.ErrPipelineReplicationNotSupported", p, err)
	}
	nodes := startCluster(t, fast, newTestTCP(t, Config{}), newTestTCP(t, Config{}), newTestTCP(t, Config{}))
	for i := range 20 {
		applyOnLeader(t, nodes, []byte{byte(i)})
	}
	leader, _ := waitLeader(t, nodes)
	want := leader.r.LastIndex()
	for _, n := range nodes {
		waitFor(t, 10*time.Second, "every node to apply the entries", func() bool { return n.r.AppliedIndex() >= want })
	}
}
