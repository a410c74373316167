package election

import (
	"slices"
	"testing"

	"github.com/hashicorp/raft"
)

// TestWakeOrder: with the leader silent, the two followers of a three-node
// cluster take distinct places in the wake order and agree that the second
// one is the first that can win. Equal places would wake both at once and
// split their pre-votes.
func TestWakeOrder(t *testing.T) {
	c := newCluster(t, 3)
	ld, _ := c.leader()
	var ranks []int
	for _, nd := range c.nodes {
		if nd == ld {
			continue
		}
		rank, winner := nd.el.wakeRank(raft.ServerID(ld.id))
		if winner != 1 {
			t.Errorf("%s: first follower that can win is at place %d, want 1", nd.id, winner)
		}
		ranks = append(ranks, rank)
	}
	slices.Sort(ranks)
	if !slices.Equal(ranks, []int{0, 1}) {
		t.Fatalf("followers' wake places %v, want [0 1]", ranks)
	}
}

// TestWakeRestoresHeartbeatTimeout: after the waker has made the followers
// elect a new leader, every node runs with the configured HeartbeatTimeout
// again (the lowered value must not outlive the wake, or a healthy
// follower would time out after LeaderLeaseTimeout).
func TestWakeRestoresHeartbeatTimeout(t *testing.T) {
	if _, ok := (&Election{cfg: Config{HeartbeatTimeout: testHT, LeaderLeaseTimeout: testLLT}}).lowHeartbeat(); !ok {
		t.Fatalf("test timing HT %v LLT %v leaves the waker nothing to lower", testHT, testLLT)
	}
	c := newCluster(t, 3)
	for range 3 {
		ld, ep := c.leader()
		c.crash(ld)
		c.leaderAbove(ep.Term, ld)
		c.start(ld)
	}
	for _, nd := range c.nodes {
		waitFor(t, nd.id+" to run with the configured HeartbeatTimeout", func() bool {
			return nd.el.Raft().ReloadableConfig().HeartbeatTimeout == testHT
		})
	}
}
