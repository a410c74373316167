package election

import (
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// Waking raft early.
//
// hashicorp/raft's follower re-arms its heartbeat timer with a random
// [HT, 2HT) each time it fires and only then compares the last contact with
// HeartbeatTimeout (raft.go runFollower), so a follower notices a dead
// leader [HT, 3HT) after the last heartbeat. The waker keeps the same rule —
// no contact for HeartbeatTimeout — but applies it on time: it watches
// raft's own LastContact and, when the rule holds, makes raft look at once.
// ReloadConfig with a lower HeartbeatTimeout is raft's only door into the
// follower loop (api.go ReloadConfig: followerNotifyCh fires the timer now);
// the loop then re-checks the last contact against the lowered value and
// starts an election. The configured value is restored as soon as raft has
// acted.
//
// Staggering. raft's pre-vote is refused by any node that still knows a
// leader, so a follower that wakes while the others still follow the old
// leader cannot win: it only gives up its leader, after which it grants
// pre-votes. Two followers that wake at the same moment both fail and wait
// an ElectionTimeout. So the followers other than the old leader wake one
// after the other, in the order of their IDs, wakeGap apart, timed so that
// the one that can win — the quorum-th, which finds enough voters without a
// leader (the second of three) — wakes at HeartbeatTimeout after the last
// contact: one pre-vote and one vote round, no split vote. The earlier ones
// wake a little before HeartbeatTimeout; that can cost no term while the
// leader is alive (the leader and the later followers refuse their
// pre-vote, and the leader's next heartbeat makes them followers again).

// None of this touches safety: raft runs its own election, in a term it
// increments on its main goroutine, and I1-I3 are untouched. It can only
// cost availability, by starting an election while the leader is alive;
// the rule is raft's own, pre-vote keeps one impatient follower from
// raising the term, and the failover command's -healthy mode measures it.

// wakeState is owned by the waker goroutine.
type wakeState struct {
	contact  time.Time // the LastContact this episode is about
	leaderID raft.ServerID
	probed   bool
	rank     int // this node's place in the wake order
	winner   int // the place of the first follower that can win
	woke     bool
}

// wakeGap is the delay between consecutive followers' wakes.
func (e *Election) wakeGap() time.Duration {
	return max(e.cfg.HeartbeatTimeout/10, 2*time.Millisecond)
}

// lowHeartbeat is the HeartbeatTimeout the waker lowers raft's to: the
// lowest raft accepts. ok is false if it is not lower than the configured
// one (LeaderLeaseTimeout == HeartbeatTimeout), in which case raft cannot be
// woken early.
func (e *Election) lowHeartbeat() (time.Duration, bool) {
	low := max(e.cfg.LeaderLeaseTimeout, MinTimeout)
	return low, low < e.cfg.HeartbeatTimeout
}

// waker runs wakeStep until Close.
func (e *Election) waker() {
	defer e.wg.Done()
	if _, ok := e.lowHeartbeat(); !ok {
		return
	}
	var st wakeState
	t := time.NewTimer(e.cfg.HeartbeatTimeout)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
		}
		t.Reset(e.wakeStep(&st))
	}
}

// wakeStep looks at raft once, wakes it if its leader has been silent long
// enough, and returns when to look again.
func (e *Election) wakeStep(st *wakeState) time.Duration {
	ht := e.cfg.HeartbeatTimeout
	if e.raft.State() != raft.Follower {
		*st = wakeState{}
		return ht / 4
	}
	lc := e.raft.LastContact()
	leaderAddr, leaderID := e.raft.LeaderWithID()
	if lc.IsZero() || (leaderID == "" && !st.probed) || leaderID == raft.ServerID(e.cfg.ID) {
		return ht / 4 // no leader heard of yet (raft's own timer handles a fresh start)
	}
	if !lc.Equal(st.contact) {
		*st = wakeState{contact: lc, leaderID: leaderID}
	}
	if st.woke {
		return ht / 4 // raft was told; its own timers take it from here
	}
	since := time.Since(lc)
	probeAt := ht / 4
	if since < probeAt {
		return probeAt - since
	}
	if !st.probed {
		st.probed = true
		_ = leaderAddr
		st.rank, st.winner = e.wakeRank(st.leaderID)
	}
	at := max(ht+time.Duration(st.rank-st.winner)*e.wakeGap(), e.cfg.LeaderLeaseTimeout)
	if since < at {
		return at - since
	}
	st.woke = true
	e.wakeRaft(lc)
	return ht / 4
}

// wakeRank returns this node's place among the voters other than the
// silent leader, ordered by ID, and the place of the first of them that can
// win: with the earlier ones it makes a quorum.
func (e *Election) wakeRank(leader raft.ServerID) (rank, winner int) {
	f := e.raft.GetConfiguration()
	if f.Error() != nil {
		return 0, 0
	}
	var ids []string
	voters := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		voters++
		if s.ID != leader {
			ids = append(ids, string(s.ID))
		}
	}
	slices.Sort(ids)
	rank = max(slices.Index(ids, e.cfg.ID), 0)
	winner = min(voters/2, len(ids)-1) // quorum voters/2+1, less this node
	return rank, max(winner, 0)
}

// wakeRaft makes raft's follower loop check its last contact now: it lowers
// HeartbeatTimeout (which fires the follower's timer at once), waits until
// raft has left the follower state or heard from a leader again, and
// restores the configured HeartbeatTimeout.
func (e *Election) wakeRaft(lc time.Time) {
	low, ok := e.lowHeartbeat()
	if !ok {
		return
	}
	rc := e.raft.ReloadableConfig()
	rc.HeartbeatTimeout = low
	if err := e.raft.ReloadConfig(rc); err != nil {
		e.log.Debug("wake: lowering HeartbeatTimeout failed", "error", err)
		return
	}
	e.log.Debug("wake: leader silent, woke raft", "since-last-contact", time.Since(lc))
	deadline := time.NewTimer(e.cfg.HeartbeatTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
wait:
	for e.raft.State() == raft.Follower && e.raft.LastContact().Equal(lc) {
		select {
		case <-e.stop:
			break wait
		case <-deadline.C:
			break wait
		case <-tick.C: // poll interval
		}
	}
	rc = e.raft.ReloadableConfig()
	rc.HeartbeatTimeout = e.cfg.HeartbeatTimeout
	if err := e.raft.ReloadConfig(rc); err != nil {
		e.log.Warn("wake: restoring HeartbeatTimeout failed", "error", err)
	}
}
