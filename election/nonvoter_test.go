package election

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/transport"
)

// TestNonVoterNeverStands: a node added with Raft().AddNonvoter never
// starts an election: not while its link to a live leader refuses
// connections (the leader silent and refusing, for it alone), and not when
// the leader's process dies (every dial to its port refused). Before issue
// 16 the non-voter's waker took wake place 0 and handed its raft a
// TimeoutNow on the refused dial; raft then raised the voters' terms before
// refusing it, and the leader lost its term. Each wake path logs what it
// does; the non-voter's log must show none.
func TestNonVoterNeverStands(t *testing.T) {
	c := newTCPCluster(t, []string{"v1", "v2", "v3"}, nil)
	ld, ep := c.leaderAbove(0)

	// The non-voter: on its own TCP transport, joined by the leader.
	logs := &lockedBuffer{}
	tcp, err := transport.NewTCP("127.0.0.1:0", "", transport.Config{Logger: c.check.logger("a0")})
	if err != nil {
		t.Fatal(err)
	}
	tr := transport.NewFaulty(tcp)
	nv, err := New(Config{
		ID: "a0", Cluster: testCluster, DataDir: t.TempDir(), Transport: tr,
		HeartbeatTimeout: c.ht, ElectionTimeout: c.et, LeaderLeaseTimeout: c.llt,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		_ = tr.Close()
		t.Fatalf("New(a0): %v", err)
	}
	defer nv.Close()
	var mu sync.Mutex
	var states []raft.RaftState
	obsCh := make(chan raft.Observation, 64)
	obs := raft.NewObserver(obsCh, false, func(o *raft.Observation) bool {
		s, ok := o.Data.(raft.RaftState)
		if ok {
			mu.Lock()
			states = append(states, s)
			mu.Unlock()
		}
		return false // recorded in the filter: the channel is never used
	})
	nv.Raft().RegisterObserver(obs)
	defer nv.Raft().DeregisterObserver(obs)
	for addBy := time.Now().Add(waitLong); ; {
		err := ld.el.Raft().AddNonvoter("a0", tr.LocalAddr(), 0, 0).Error()
		if err == nil {
			break
		}
		if !errors.Is(err, raft.ErrLeadershipLost) && !errors.Is(err, raft.ErrNotLeader) || time.Now().After(addBy) {
			t.Fatalf("AddNonvoter: %v", err)
		}
		t.Logf("AddNonvoter: %v (the leader's lease lapsed under load); again", err)
		ld, _ = c.leaderAbove(0)
	}
	ld, ep = c.leaderAbove(0)
	waitFor(t, "a0 to follow "+ld.id, func() bool {
		_, id := nv.Raft().LeaderWithID()
		return string(id) == ld.id
	})

	// A refused link between the non-voter and the live leader, for 10 HT.
	terms := map[string]uint64{}
	for _, nd := range c.nodes {
		terms[nd.id] = nd.el.Raft().CurrentTerm()
	}
	start := time.Now()
	tr.Refuse(raft.ServerAddress(ld.addr))
	deadline := time.Now().Add(10 * c.ht)
	waitFor(t, "10 HT", func() bool { return time.Now().After(deadline) })
	if !c.check.disturbedSince(start.Add(-2 * c.et)) {
		for _, nd := range c.nodes {
			if got := nd.el.Raft().CurrentTerm(); got != terms[nd.id] {
				t.Errorf("%s's term %d -> %d while only the non-voter's link to the leader refused", nd.id, terms[nd.id], got)
			}
		}
	}
	tr.Heal()
	ld, ep = c.leaderAbove(0)
	waitFor(t, "a0 to follow "+ld.id+" again", func() bool {
		_, id := nv.Raft().LeaderWithID()
		return string(id) == ld.id
	})

	// Kill the leader: raft and its transport shut down at once, so every
	// dial to its port is refused.
	if err := ld.el.Raft().Shutdown().Error(); err != nil {
		t.Fatalf("shutdown %s: %v", ld.id, err)
	}
	var live []*tcpNode
	for _, nd := range c.nodes {
		if nd != ld {
			live = append(live, nd)
		}
	}
	var nld *tcpNode
	waitFor(t, "a new leader among the voters", func() bool {
		for _, nd := range live {
			if e, err := nd.el.Epoch(); err == nil && e.Term > ep.Term {
				c.check.epoch("poll", nd.id, e)
				nld = nd
				return true
			}
		}
		return false
	})
	waitFor(t, "a0 to follow "+nld.id, func() bool {
		_, id := nv.Raft().LeaderWithID()
		return string(id) == nld.id
	})
	mu.Lock()
	defer mu.Unlock()
	for _, s := range states {
		if s != raft.Follower {
			t.Errorf("the non-voter's raft went %v; its states: %v", s, states)
		}
	}
	for _, msg := range []string{"asked raft to stand", "woke raft", "told the other voters"} {
		if strings.Contains(logs.String(), msg) {
			t.Errorf("the non-voter's waker acted (%q):\n%s", msg, logs.String())
		}
	}
}
