package election

import (
	"context"
	"errors"
	"net"
	"slices"
	"syscall"
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
// One winner, no split vote. raft's pre-vote is refused by any node that
// still knows a leader, so the first follower to wake cannot win: it gives
// up its leader and asks the others for a pre-vote, which they refuse. Two
// followers that wake within the same millisecond both fail and wait an
// ElectionTimeout. So:
//
//   - The followers other than the old leader wake in the order of their
//     IDs, wakeSpread apart: more than the spread of their last contacts
//     (raft's leader heartbeats each follower on its own random [HT/10,
//     HT/5) timer), so two of them never wake together. The first wakes at
//     HeartbeatTimeout after its last contact.
//   - A follower that receives a pre-vote request (raft reports each to
//     observers) while its own leader has been silent for at least
//     LeaderLeaseTimeout wakes at once: the sender gave up its leader before
//     it asked, so this follower's own pre-vote will be granted. For three
//     nodes that makes the second follower the winner, one one-way delay
//     after the first woke, with one pre-vote and one vote round. In larger
//     clusters the later ones are staggered by preVoteGap.
//
// A killed process. When the leader's process dies and its host stays up,
// its connections close and its port refuses new ones. A follower that has
// not heard from its leader for longer than any normal heartbeat gap (HT/4)
// dials the leader's address once. If the dial is refused, nothing listens
// there any more: the follower hands its own raft a TimeoutNow request
// (transferSelf), the request a leader sends in a leadership transfer. raft
// becomes a candidate at once, without pre-vote, and asks for votes marked
// as a leadership transfer, which the other followers grant although they
// still know the dead leader (the vote's log comparison still applies).
// The followers do this in their wake order, transferGap apart, each only
// if no leader has been heard from meanwhile; so the first wins unless its
// log is behind, and then the next one does. A dial that succeeds or times
// out changes nothing. Only a refused TCP connect counts; addresses that
// are not host:port (the in-memory transport) are never probed.
//
// None of this touches safety: raft runs its own election, in a term it
// increments on its main goroutine, and I1-I3 are untouched. It can only
// cost availability, by starting an election while the leader is alive
// (the transfer request: while something refuses connections on the
// leader's raft address, such as a firewall rejecting with a TCP reset).
// The rule is raft's own; pre-vote keeps one impatient follower from
// raising the term (the leader and every follower that still hears from it
// refuse, and the leader's next heartbeat makes it a follower again); a
// follower woken by a peer's pre-vote must itself have missed the leader for
// LeaderLeaseTimeout. The failover command's -healthy mode measures it.

// wakeState is owned by the waker goroutine.
type wakeState struct {
	contact  time.Time // the LastContact this episode is about
	leaderID raft.ServerID
	probed   bool
	refused  bool      // the leader's port refused a connection
	peer     time.Time // a pre-vote request arrived (zero: none)
	rank     int       // this node's place in the wake order
	winner   int       // the place of the first follower that can win
	woke     bool
}

// wakeSpread is the delay between consecutive followers' own wakes: above
// the spread of their last contacts (HT/5).
func (e *Election) wakeSpread() time.Duration {
	return max(e.cfg.HeartbeatTimeout/4, 2*time.Millisecond)
}

// transferGap staggers the followers' transfer requests after a refused
// dial. Each follower counts from its own last contact, and those differ by
// up to HT/5 (wakeSpread covers that); on top, the first needs time to win
// (fsyncs of term and vote on both sides, two one-way delays) and be heard
// from.
func (e *Election) transferGap() time.Duration {
	return e.wakeSpread() + max(e.cfg.HeartbeatTimeout/10, 5*time.Millisecond)
}

// preVoteGap staggers the followers woken by a pre-vote in clusters of five
// or more, so that they do not all ask at once.
func (e *Election) preVoteGap() time.Duration {
	return max(e.cfg.HeartbeatTimeout/50, 2*time.Millisecond)
}

// lowHeartbeat is the HeartbeatTimeout the waker lowers raft's to: the
// lowest raft accepts. ok is false if it is not lower than the configured
// one (LeaderLeaseTimeout == HeartbeatTimeout), in which case raft cannot be
// woken early.
func (e *Election) lowHeartbeat() (time.Duration, bool) {
	low := max(e.cfg.LeaderLeaseTimeout, MinTimeout)
	return low, low < e.cfg.HeartbeatTimeout
}

// waker runs wakeStep until Close, after each timer and each pre-vote
// request raft reports.
func (e *Election) waker() {
	defer e.wg.Done()
	if _, ok := e.lowHeartbeat(); !ok {
		return
	}
	var st wakeState
	var ord wakeOrder
	t := time.NewTimer(e.cfg.HeartbeatTimeout)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
		case <-e.preVoteCh:
			if st.peer.IsZero() {
				st.peer = time.Now()
				e.log.Debug("wake: pre-vote request seen", "since-last-contact", time.Since(e.raft.LastContact()))
			}
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
		t.Reset(e.wakeStep(&st, &ord))
	}
}

// wakeStep looks at raft once, wakes it if its leader has been silent long
// enough, and returns when to look again.
func (e *Election) wakeStep(st *wakeState, ord *wakeOrder) time.Duration {
	ht := e.cfg.HeartbeatTimeout
	switch e.raft.State() {
	case raft.Follower:
	case raft.Leader:
		*st, *ord = wakeState{}, wakeOrder{}
		e.setRaftHeartbeat(ht) // a leader heartbeats every HT/10..HT/5
		return ht / 4
	default:
		*st = wakeState{}
		return ht / 4
	}
	lc := e.raft.LastContact()
	leaderAddr, leaderID := e.raft.LeaderWithID()
	if lc.IsZero() || (leaderID == "" && st.contact.IsZero()) || leaderID == raft.ServerID(e.cfg.ID) {
		st.peer = time.Time{}
		return ht / 4 // no leader heard of yet (raft's own timer handles a fresh start)
	}
	if leaderID != "" && leaderID != ord.leader {
		// A new leader: find this node's place and let raft's own timer
		// keep to it (see wakeOrder).
		ord.leader = leaderID
		ord.rank, ord.winner = e.wakeRank(leaderID)
		ord.heartbeat = ht + time.Duration(ord.rank)*e.wakeSpread()
		e.setRaftHeartbeat(ord.heartbeat)
	}
	if !lc.Equal(st.contact) {
		peer := st.peer
		*st = wakeState{contact: lc, leaderID: leaderID}
		if peer.After(lc) {
			st.peer = peer
		}
	}
	if st.woke {
		return ht / 4 // raft was told; its own timers take it from here
	}
	since := time.Since(lc)
	probeAt := ht / 4
	if since < probeAt && st.peer.IsZero() {
		return probeAt - since
	}
	if !st.probed {
		st.probed = true
		if since >= probeAt {
			st.refused = e.refused(string(leaderAddr))
		}
		st.rank, st.winner = ord.rank, ord.winner
		if st.leaderID != ord.leader {
			st.rank, st.winner = e.wakeRank(st.leaderID)
		}
	}
	if st.refused {
		at := probeAt + time.Duration(st.rank)*e.transferGap()
		if since < at {
			return at - since
		}
		st.woke = true
		e.transferSelf(lc)
		return ht / 4
	}
	floor := e.cfg.LeaderLeaseTimeout
	at := ht + time.Duration(st.rank)*e.wakeSpread()
	if !st.peer.IsZero() {
		gap := time.Duration(max(st.rank-st.winner, 0)) * e.preVoteGap()
		at = min(at, max(st.peer.Sub(lc), floor)+gap)
	}
	if since < at {
		return at - since
	}
	st.woke = true
	e.wakeRaft(lc, max(ord.heartbeat, ht))
	return ht / 4
}

// transferSelf hands raft, through the channel it consumes RPCs from, the
// TimeoutNow request a leader sends to the target of a leadership transfer:
// raft becomes a candidate at once and its vote requests are marked as a
// transfer. It does nothing unless raft is still a follower that has heard
// nothing since lc.
func (e *Election) transferSelf(lc time.Time) {
	if e.raft.State() != raft.Follower || !e.raft.LastContact().Equal(lc) {
		return
	}
	rpc := raft.RPC{
		Command: &raft.TimeoutNowRequest{RPCHeader: raft.RPCHeader{
			ProtocolVersion: raft.ProtocolVersionMax,
			ID:              []byte(e.cfg.ID),
			Addr:            []byte(e.localAddr),
		}},
		RespChan: make(chan raft.RPCResponse, 1), // raft never blocks on it
	}
	select {
	case e.rpcs <- rpc:
		e.log.Debug("wake: leader's port refused, asked raft to stand now", "since-last-contact", time.Since(lc))
	case <-e.stop:
	}
}

// wakeOrder is this follower's place in the wake order under its current
// leader. raft's own follower timer would otherwise fire on any follower
// from HeartbeatTimeout on, and a later follower whose timer fires in the
// very millisecond the first one wakes splits the pre-votes (measured: about
// one crash in fifty). So each follower also runs raft with its own wake
// time as HeartbeatTimeout — HT for the first, HT + wakeSpread for the
// second, and so on (ElectionTimeout raised with it where needed, as raft
// requires ET >= HT) — and a leader runs with the configured one.
type wakeOrder struct {
	leader       raft.ServerID
	rank, winner int
	heartbeat    time.Duration // raft's HeartbeatTimeout for this place
}

// setRaftHeartbeat sets raft's HeartbeatTimeout to d, and its
// ElectionTimeout to the larger of the configured one and d.
func (e *Election) setRaftHeartbeat(d time.Duration) {
	rc := e.raft.ReloadableConfig()
	et := max(e.cfg.ElectionTimeout, d)
	if rc.HeartbeatTimeout == d && rc.ElectionTimeout == et {
		return
	}
	rc.HeartbeatTimeout, rc.ElectionTimeout = d, et
	if err := e.raft.ReloadConfig(rc); err != nil {
		e.log.Warn("wake: setting HeartbeatTimeout failed", "heartbeat-timeout", d, "error", err)
	}
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

// refused dials addr once and reports whether the connection was refused:
// nothing listens there, so the leader's process is gone.
func (e *Election) refused(addr string) bool {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.HeartbeatTimeout/4)
	defer cancel()
	go func() { // Close cuts the dial short
		select {
		case <-e.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		_ = c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// wakeRaft makes raft's follower loop check its last contact now: it lowers
// HeartbeatTimeout (which fires the follower's timer at once), waits until
// raft has left the follower state or heard from a leader again, and
// restores the configured HeartbeatTimeout.
func (e *Election) wakeRaft(lc time.Time, restore time.Duration) {
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
	e.setRaftHeartbeat(restore)
}
