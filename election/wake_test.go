package election

import (
	"fmt"
	"slices"
	"testing"
	"time"

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
// elect a new leader, the leader runs raft with the configured
// HeartbeatTimeout and each follower with the one of its place in the wake
// order (the lowered value must not outlive the wake, or a healthy follower
// would time out after LeaderLeaseTimeout; a leader with a raised one would
// heartbeat too slowly).
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
	ld, _ := c.leader()
	for _, nd := range c.nodes {
		want := testHT
		if nd != ld {
			rank, _ := nd.el.wakeRank(raft.ServerID(ld.id))
			want = testHT + time.Duration(rank)*nd.el.wakeSpread()
		}
		waitFor(t, fmt.Sprintf("%s to run raft with HeartbeatTimeout %v", nd.id, want), func() bool {
			return nd.el.Raft().ReloadableConfig().HeartbeatTimeout == want
		})
	}
}

// TestWakeWithLiveLeaderRestores: a wake while the leader is in fact alive
// (raft finds a recent contact and stays follower) still puts raft back on
// the follower's own HeartbeatTimeout; left lowered, the follower would
// start elections whenever a heartbeat came LeaderLeaseTimeout late.
func TestWakeWithLiveLeaderRestores(t *testing.T) {
	c := newCluster(t, 3)
	ld, _ := c.leader()
	for _, nd := range c.nodes {
		if nd == ld {
			continue
		}
		rank, _ := nd.el.wakeRank(raft.ServerID(ld.id))
		want := testHT + time.Duration(rank)*nd.el.wakeSpread()
		waitFor(t, fmt.Sprintf("%s to run raft with HeartbeatTimeout %v", nd.id, want), func() bool {
			return nd.el.Raft().ReloadableConfig().HeartbeatTimeout == want
		})
		nd.el.wakeRaft(nd.el.Raft().LastContact(), want)
		if got := nd.el.Raft().ReloadableConfig().HeartbeatTimeout; got != want {
			t.Errorf("%s: HeartbeatTimeout %v after a wake, want %v", nd.id, got, want)
		}
	}
}
