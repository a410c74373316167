package transport

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"go.uber.org/goleak"

	"github.com/termfence/termfence/internal/testwait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// quietLogger discards logs; refused TLS handshakes and injected faults make
// raft and the transport log errors by design.
func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// quietHCLog is an hclog.Logger that logs nothing, for raw raft.
func quietHCLog() hclog.Logger { return hclog.NewNullLogger() }

type node struct {
	id    raft.ServerID
	addr  raft.ServerAddress
	trans Transport
	r     *raft.Raft
}

type nopFSM struct{}

func (nopFSM) Apply(*raft.Log) any                 { return nil }
func (nopFSM) Snapshot() (raft.FSMSnapshot, error) { return nopSnapshot{}, nil }
func (nopFSM) Restore(rc io.ReadCloser) error      { return rc.Close() }

type nopSnapshot struct{}

func (nopSnapshot) Persist(sink raft.SnapshotSink) error { return sink.Close() }
func (nopSnapshot) Release()                             {}

// testConfig returns a raft config with heartbeat, election and lease
// timeouts all set to d.
func testConfig(id raft.ServerID, d time.Duration) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = id
	c.HeartbeatTimeout = d
	c.ElectionTimeout = d
	c.LeaderLeaseTimeout = d
	c.CommitTimeout = 5 * time.Millisecond
	c.Logger = quietHCLog()
	return c
}

// fast is the timeout for tests that expect elections.
const fast = 50 * time.Millisecond

// stable is the timeout for tests that assert no election happens: long
// enough that a loaded machine (-race, 2 cores, other packages' tests) does
// not miss a lease by accident.
const stable = time.Second

// startCluster starts one raft node per transport, all bootstrapped with the
// same configuration, with timeouts d. Raft closes each transport on
// Shutdown, which the test's cleanup runs.
func startCluster(t *testing.T, d time.Duration, transports ...Transport) []*node {
	t.Helper()
	var cfg raft.Configuration
	nodes := make([]*node, len(transports))
	for i, tr := range transports {
		nodes[i] = &node{id: raft.ServerID(fmt.Sprintf("n%d", i)), addr: tr.LocalAddr(), trans: tr}
		cfg.Servers = append(cfg.Servers, raft.Server{ID: nodes[i].id, Address: nodes[i].addr, Suffrage: raft.Voter})
	}
	for _, n := range nodes {
		store := raft.NewInmemStore()
		if err := raft.BootstrapCluster(testConfig(n.id, d), store, store, raft.NewInmemSnapshotStore(), n.trans, cfg); err != nil {
			t.Fatalf("bootstrap %s: %v", n.id, err)
		}
		r, err := raft.NewRaft(testConfig(n.id, d), nopFSM{}, store, store, raft.NewInmemSnapshotStore(), n.trans)
		if err != nil {
			t.Fatalf("new raft %s: %v", n.id, err)
		}
		n.r = r
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			if err := n.r.Shutdown().Error(); err != nil {
				t.Errorf("shutdown %s: %v", n.id, err)
			}
			_ = n.trans.Close()
		}
	})
	return nodes
}

// waitFor polls cond every 5ms until it returns true or d, scaled with the
// machine's load (testwait.Bound), passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	d = testwait.Bound(d)
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// applyOnLeader applies data on the current leader, again on the next one
// if leadership moved while it committed (an election under load is not
// what the callers test), and fails the test on any other error.
func applyOnLeader(t *testing.T, nodes []*node, data []byte) {
	t.Helper()
	deadline := time.Now().Add(testwait.Bound(30 * time.Second))
	for {
		leader, _ := waitLeader(t, nodes)
		err := leader.r.Apply(data, 5*time.Second).Error()
		switch {
		case err == nil:
			return
		case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
			if time.Now().After(deadline) {
				t.Fatalf("apply %x: leadership kept moving: %v", data, err)
			}
			t.Logf("apply %x: %v; again on the next leader", data, err)
		default:
			t.Fatalf("apply %x: %v", data, err)
		}
	}
}

// waitLeader waits until exactly one of nodes (ignoring skip) is Leader and
// every other non-skipped node agrees on it and its term, and returns it.
func waitLeader(t *testing.T, nodes []*node, skip ...*node) (*node, uint64) {
	t.Helper()
	var leader *node
	var term uint64
	waitFor(t, 10*time.Second, "a stable leader", func() bool {
		leader, term = nil, 0
		for _, n := range nodes {
			if contains(skip, n) || n.r.State() != raft.Leader {
				continue
			}
			if leader != nil {
				return false
			}
			leader, term = n, n.r.CurrentTerm()
		}
		if leader == nil {
			return false
		}
		for _, n := range nodes {
			if contains(skip, n) || n == leader {
				continue
			}
			addr, _ := n.r.LeaderWithID()
			if addr != leader.addr || n.r.CurrentTerm() != term {
				return false
			}
		}
		return leader.r.State() == raft.Leader && leader.r.CurrentTerm() == term
	})
	return leader, term
}

func contains(ns []*node, n *node) bool {
	for _, x := range ns {
		if x == n {
			return true
		}
	}
	return false
}

func heartbeat(from raft.ServerAddress, term uint64) *raft.AppendEntriesRequest {
	return &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("sender"), Addr: []byte(from)},
		Term:      term,
	}
}
