package election

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// stateLog records a node's raft state changes.
type stateLog struct {
	mu     sync.Mutex
	states []raft.RaftState
}

func watchStates(t *testing.T, nd *node) *stateLog {
	t.Helper()
	l := &stateLog{}
	obs := raft.NewObserver(make(chan raft.Observation, 1), false, func(o *raft.Observation) bool {
		if s, ok := o.Data.(raft.RaftState); ok {
			l.mu.Lock()
			l.states = append(l.states, s)
			l.mu.Unlock()
		}
		return false
	})
	nd.el.Raft().RegisterObserver(obs)
	t.Cleanup(func() { nd.el.Raft().DeregisterObserver(obs) })
	return l
}

func (l *stateLog) count(s raft.RaftState) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, x := range l.states {
		if x == s {
			n++
		}
	}
	return n
}

// timeouts counts the elections raft on node started on its own timers
// (the checker's disturbances: a heartbeat or election timeout) since.
func (c *checker) timeouts(node string, since time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for i, at := range c.unrest {
		if c.unrestBy[i] == node && !at.Before(since) {
			n++
		}
	}
	return n
}

// leaderless waits until survivor has started three elections of its own
// since it lost its peer — it keeps trying and keeps failing — and checks
// that it never became leader meanwhile (states) and holds no epoch.
func leaderless(t *testing.T, c *cluster, survivor *node, states *stateLog, since time.Time) {
	t.Helper()
	waitFor(t, survivor.id+" to stand three times", func() bool { return c.check.timeouts(survivor.id, since) >= 3 })
	if n := states.count(raft.Leader); n > 0 {
		t.Fatalf("%s became leader without a majority of the voters (%d times)", survivor.id, n)
	}
	if ep, err := survivor.el.Epoch(); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("%s holds %v (%v) without a majority of the voters", survivor.id, ep, err)
	}
}

// TestSmallestSafeDeployments backs docs/DESIGN.md's "Smallest safe
// deployments": three voters survive the loss of any one; two voters do
// not (a majority of two is two), and adding a non-voter to the two does
// not help — it never votes and never leads, so the surviving voter cannot
// form a majority and the non-voter cannot take over.
func TestSmallestSafeDeployments(t *testing.T) {
	t.Run("three voters lose one", func(t *testing.T) {
		c := newCluster(t, 3)
		ld, ep := c.leader()
		c.crash(ld)
		c.leaderAbove(ep.Term, ld) // the other two elect a leader
	})
	t.Run("two voters lose one", func(t *testing.T) {
		c := newCluster(t, 2)
		ld, _ := c.leader()
		var other *node
		for _, nd := range c.nodes {
			if nd != ld {
				other = nd
			}
		}
		states := watchStates(t, ld)
		since := time.Now()
		c.crash(other) // the follower: the leader then loses its quorum
		leaderless(t, c, ld, states, since)
	})
	t.Run("two voters and a non-voter lose one voter", func(t *testing.T) {
		c := newCluster(t, 2)
		nv := c.join("w3")
		onLeader(t, c, "AddNonvoter(w3)", func(ld *node) error { return ld.el.AddNonvoter(context.Background(), "w3", "w3") })
		waitFor(t, "the non-voter to know the configuration", func() bool {
			ms, err := nv.el.Members()
			return err == nil && slices.ContainsFunc(ms, func(m Member) bool { return m.ID == "w3" && !m.Voter })
		})
		nvStates := watchStates(t, nv)
		ld, _ := c.leader()
		var other *node
		for _, nd := range c.nodes[:2] {
			if nd != ld {
				other = nd
			}
		}
		states := watchStates(t, other)
		since := time.Now()
		c.crash(ld) // the leader this time: the other voter alone cannot win
		leaderless(t, c, other, states, since)
		if _, err := nv.el.Epoch(); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("the non-voter holds an epoch: %v", err)
		}
		if nvStates.count(raft.Candidate)+nvStates.count(raft.Leader) > 0 {
			t.Fatalf("the non-voter stood or led: %v", nvStates.states)
		}
	})
}
