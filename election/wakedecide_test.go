package election

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func voterIDs(n int) []raft.ServerID {
	var ids []raft.ServerID
	for i := n; i >= 1; i-- { // raft's order is not the wake order
		ids = append(ids, raft.ServerID(fmt.Sprintf("n%d", i)))
	}
	return ids
}

// TestPlaceAmong: the wake order under a leader is the other voters by
// ID; the first that can win is the one that, with the ones before it,
// makes a quorum; a non-voter has no place.
func TestPlaceAmong(t *testing.T) {
	for _, c := range []struct {
		voters       int
		self, leader string
		want         place
	}{
		{3, "n1", "n3", place{voter: true, rank: 0, winner: 1, quorum: 2}},
		{3, "n2", "n3", place{voter: true, rank: 1, winner: 1, quorum: 2}},
		{3, "n3", "n1", place{voter: true, rank: 1, winner: 1, quorum: 2}},
		{5, "n1", "n5", place{voter: true, rank: 0, winner: 2, quorum: 3}},
		{5, "n3", "n5", place{voter: true, rank: 2, winner: 2, quorum: 3}},
		{5, "n5", "n1", place{voter: true, rank: 3, winner: 2, quorum: 3}},
		{4, "n2", "n1", place{voter: true, rank: 0, winner: 2, quorum: 3}},
		{1, "n1", "n1", place{voter: true, rank: 0, winner: 0, quorum: 1}},
		{3, "x9", "n1", place{voter: false, rank: 0, winner: 1, quorum: 2}},
	} {
		if got := placeAmong(voterIDs(c.voters), raft.ServerID(c.self), raft.ServerID(c.leader)); got != c.want {
			t.Errorf("%d voters, %s under %s: %+v, want %+v", c.voters, c.self, c.leader, got, c.want)
		}
	}
}

// TestStandOnRefused is the waker's decision after a refused probe of its
// silent leader, on its own inputs: a follower stands (hands its raft a
// TimeoutNow) only if its probe was refused, it can win (it and the
// followers before it make a quorum), a majority of the voters lost the
// leader (itself and the voters that asked for a pre-vote), and its turn
// has come; otherwise it waits for its turn, or for evidence with no time
// of its own. Why: a follower that stood on a refused link alone
// deposed a live leader over and over.
func TestStandOnRefused(t *testing.T) {
	const probeAt, gap = 50 * time.Millisecond, 60 * time.Millisecond
	p3 := func(self string) place { return placeAmong(voterIDs(3), raft.ServerID(self), "n3") }
	p5 := func(self string) place { return placeAmong(voterIDs(5), raft.ServerID(self), "n5") }
	for _, c := range []struct {
		name      string
		p         place
		refused   bool
		lost      int
		since     time.Duration
		wantStand bool
		wantWait  time.Duration
	}{
		{"3 voters, the winner, refused, nobody else lost the leader", p3("n2"), true, 0, time.Hour, false, 0},
		{"3 voters, the winner, refused, one other lost it, its turn", p3("n2"), true, 1, probeAt, true, 0},
		{"3 voters, the winner, refused, one other lost it, early", p3("n2"), true, 1, probeAt - 10*time.Millisecond, false, 10 * time.Millisecond},
		{"3 voters, the winner, not refused", p3("n2"), false, 2, time.Hour, false, 0},
		{"3 voters, the first follower (announces, never stands)", p3("n1"), true, 2, time.Hour, false, 0},
		{"5 voters, the winner, one other lost it", p5("n3"), true, 1, time.Hour, false, 0},
		{"5 voters, the winner, two others lost it", p5("n3"), true, 2, probeAt, true, 0},
		{"5 voters, after the winner, waits a gap", p5("n4"), true, 2, probeAt, false, gap},
		{"5 voters, after the winner, its turn", p5("n4"), true, 2, probeAt + gap, true, 0},
		{"5 voters, after the winner, too little evidence", p5("n4"), true, 1, time.Hour, false, 0},
		{"5 voters, before the winner", p5("n2"), true, 4, time.Hour, false, 0},
		{"a non-voter", placeAmong(voterIDs(3), "x9", "n3"), true, 2, time.Hour, false, 0},
	} {
		stand, wait := standOnRefused(c.p, c.refused, c.lost, c.since, probeAt, gap)
		if stand != c.wantStand || wait != c.wantWait {
			t.Errorf("%s (%+v, lost %d, since %v): stand %v, wait %v; want %v, %v", c.name, c.p, c.lost, c.since, stand, wait, c.wantStand, c.wantWait)
		}
	}
}
