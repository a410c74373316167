package election

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/transport"
)

// waker makes a follower notice a silent leader on time, so that the
// cluster fails over in about one HeartbeatTimeout instead of up to three.
// One waker runs per Election, from New until Close; it owns its own state
// and reaches raft only through raft's public API and, for transferSelf,
// the channel raft reads its RPCs from.
//
// # Failover timing
//
// raft alone notices a dead leader [HT, 3HT) after its last heartbeat (HT
// is HeartbeatTimeout): its follower timer is re-armed when it fires, not
// reset on contact. The waker applies raft's own rule — no contact for HT —
// on time instead, and wakes raft's follower loop through ReloadConfig; the
// followers wake one after another, and a follower that is asked for a
// pre-vote while its own leader is silent wakes at once, so that one of
// them wins the first vote. A follower whose dial to a leader silent for
// HT/4 is refused (the process died, the host is up) does not wait for HT
// once it has evidence that a majority lost the leader too: it hands its
// own raft the TimeoutNow request of a leadership transfer, so raft stands
// at once and the other followers grant its vote although they still know
// the dead leader. All of this needs LeaderLeaseTimeout below
// HeartbeatTimeout (raft accepts no lower HeartbeatTimeout than
// LeaderLeaseTimeout); with the two equal raft's own timing applies. The
// Election owns raft's HeartbeatTimeout: do not change it through
// Raft().ReloadConfig. Waking early changes when raft holds an election,
// never how, and so leaves every guarantee of the package as it is; it can
// only cost an election if a live leader goes silent for HT, which raft's
// own timer would also punish, a little later, or if a majority of the
// voters finds the live leader both silent and refusing connections. A
// non-voter's waker does nothing. Measured figures: docs/PERFORMANCE.md.
//
// # Waking raft early
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
//     IDs, spread() apart: more than the spread of their last contacts
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
// probes the leader's address once, through the transport when it is a
// transport.Prober (so the probe takes the path raft's connections take),
// otherwise with a plain TCP dial. A refused probe says that nothing
// listens there for this follower — or that something between the two
// rejects connections: a firewall REJECT, or an ICMP port-unreachable,
// which Linux also reports as a refused connection. A follower alone
// cannot tell the two apart, and acting alone on the second
// deposes a live leader over and over: each side of a refused link wins
// with the third node's vote in turn. So a refused probe forces an election
// only with evidence that a majority of the voters lost the leader:
//
//   - the followers before the first that can win in the wake order (see
//     below; for three nodes, the first follower) announce a refused probe
//     to the other voters, with a RequestPreVote of their own (announce);
//   - raft reports every pre-vote request it is asked to observers, so a
//     follower counts the voters that asked since it last heard from its
//     leader, in a term above its own: each of them lost the leader (an
//     announcement, or raft's own pre-vote after its heartbeat timeout);
//   - a follower from the first that can win on, whose own probe was
//     refused, stands once those voters and itself make a quorum: it hands
//     its raft the TimeoutNow request a leader sends in a leadership
//     transfer (transferSelf). raft becomes a candidate at once, without
//     pre-vote, and asks for votes marked as a leadership transfer, which
//     the other followers grant although they still know the dead leader
//     (the vote's log comparison still applies).
//
// Standing followers go in wake order, transferGap apart, each only if no
// leader has been heard from meanwhile; so the first wins unless its log is
// behind, and then the next one does. When the evidence does not come, the
// follower falls back to the silent-leader wake above, raft's pre-vote
// included, which a follower that still hears the leader refuses: with a
// refused link between the leader and one follower, raft's pre-vote keeps
// the leader, as raw raft does. A probe that succeeds or times out changes
// nothing; an address the transport cannot probe and that is not host:port
// (the in-memory transport) is never probed.
//
// None of this touches safety: raft runs its own election, in a term it
// increments on its main goroutine, and invariants I1-I3 of docs/DESIGN.md
// are untouched. It can only cost availability, by starting an election
// while the leader is alive: for the transfer request, a majority must find
// the live leader silent for HT/4 and refusing connections. The rule is
// raft's own; pre-vote keeps one impatient follower from raising the term
// (the leader and every follower that still hears from it refuse, and the
// leader's next heartbeat makes it a follower again); a follower woken by a
// peer's pre-vote must itself have missed the leader for LeaderLeaseTimeout.
// The failover command's -healthy mode measures it.
//
// A non-voter never wakes, probes or announces: raft does not let it stand
// (it cannot win), and a candidacy it started would still raise the voters'
// terms.
type waker struct {
	raft *raft.Raft
	log  *slog.Logger
	id   string // this node's server ID
	addr string // this node's raft address (its own TimeoutNow names it)
	// tr is the transport the Election was given: announce sends through
	// it, and refused probes through it when it is a transport.Prober.
	tr transport.Transport
	// ht, et and llt are the configured HeartbeatTimeout, ElectionTimeout
	// and LeaderLeaseTimeout; raft runs with others while the waker acts.
	ht, et, llt time.Duration
	// inbox is the channel raft consumes RPCs from: transferSelf hands raft
	// a request there.
	inbox chan<- raft.RPC

	// preVoteCh receives, without ever blocking raft, each pre-vote request
	// raft is asked (preVoteObs reports them); a burst beyond its buffer is
	// dropped.
	preVoteCh  chan raft.Observation
	preVoteObs *raft.Observer

	quit chan struct{} // closed by stop
	done chan struct{} // closed when run returns
	rpcs sync.WaitGroup

	// Owned by the run goroutine.
	st  wakeState
	ord wakeOrder
}

// preVoteBuffer is the capacity of preVoteCh: enough for every other voter
// of any sane cluster to ask once between two looks of the waker.
const preVoteBuffer = 16

// newWaker registers the waker's pre-vote observer with r and starts its
// goroutine. c is the Election's Config with defaults applied.
func newWaker(r *raft.Raft, c Config, addr string, inbox chan<- raft.RPC) *waker {
	w := &waker{
		raft:      r,
		log:       c.Logger,
		id:        c.ID,
		addr:      addr,
		tr:        c.Transport,
		ht:        c.HeartbeatTimeout,
		et:        c.ElectionTimeout,
		llt:       c.LeaderLeaseTimeout,
		inbox:     inbox,
		preVoteCh: make(chan raft.Observation, preVoteBuffer),
		quit:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	w.preVoteObs = raft.NewObserver(w.preVoteCh, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.RequestPreVoteRequest)
		return ok
	})
	r.RegisterObserver(w.preVoteObs)
	go w.run()
	return w
}

// stop deregisters the observer and ends the goroutine, cutting short a
// probe or a wait in progress, and waits for announcements still in
// flight (raft has closed the transport by then, which fails them). Call
// it once.
func (w *waker) stop() {
	w.raft.DeregisterObserver(w.preVoteObs)
	close(w.quit)
	<-w.done
	w.rpcs.Wait()
}

// wakeState is what the waker knows about the current silence of its
// leader: one episode per LastContact.
type wakeState struct {
	contact  time.Time // the LastContact this episode is about
	leaderID raft.ServerID
	place    place
	probed   bool
	refused  bool      // the leader's port refused a connection
	peer     time.Time // a pre-vote request arrived (zero: none)
	// lost holds the voters that asked for a pre-vote after contact, in a
	// term above this node's: each of them lost the leader too.
	lost map[raft.ServerID]time.Time
	woke bool
}

// place is this node's place in the wake order under a leader.
type place struct {
	voter  bool // this node is a voter (a non-voter never wakes raft)
	rank   int  // among the voters other than the leader, by ID
	winner int  // the rank of the first follower that can win
	quorum int  // voters/2 + 1
}

// spread is the delay between consecutive followers' own wakes: above the
// spread of their last contacts (HT/5).
func (w *waker) spread() time.Duration {
	return max(w.ht/4, 2*time.Millisecond)
}

// transferGap staggers the followers' transfer requests after a refused
// probe. Each follower counts from its own last contact, and those differ
// by up to HT/5 (spread covers that); on top, the first needs time to win
// (fsyncs of term and vote on both sides, two one-way delays) and be heard
// from.
func (w *waker) transferGap() time.Duration {
	return w.spread() + max(w.ht/10, 5*time.Millisecond)
}

// preVoteGap staggers the followers woken by a pre-vote in clusters of five
// or more, so that they do not all ask at once.
func (w *waker) preVoteGap() time.Duration {
	return max(w.ht/50, 2*time.Millisecond)
}

// lowHeartbeat is the HeartbeatTimeout the waker lowers raft's to: the
// lowest raft accepts. ok is false if it is not lower than the configured
// one (LeaderLeaseTimeout == HeartbeatTimeout), in which case raft cannot be
// woken early.
func (w *waker) lowHeartbeat() (time.Duration, bool) {
	low := max(w.llt, MinTimeout)
	return low, low < w.ht
}

// run calls step until stop, after each timer and each pre-vote request
// raft reports.
func (w *waker) run() {
	defer close(w.done)
	if _, ok := w.lowHeartbeat(); !ok {
		return
	}
	t := time.NewTimer(w.ht)
	defer t.Stop()
	for {
		select {
		case <-w.quit:
			return
		case <-t.C:
		case o := <-w.preVoteCh:
			w.preVote(o)
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
		t.Reset(w.step())
	}
}

// preVote records a pre-vote request raft was asked (admission.go let it
// through only from a voter at its configured address).
func (w *waker) preVote(o raft.Observation) {
	req, _ := o.Data.(raft.RequestPreVoteRequest)
	now := time.Now()
	if w.st.peer.IsZero() {
		w.st.peer = now
		w.log.Debug("wake: pre-vote request seen", "from", string(req.ID), "since-last-contact", time.Since(w.raft.LastContact()))
	}
	if len(req.ID) > 0 && req.Term > w.raft.CurrentTerm() {
		if w.st.lost == nil {
			w.st.lost = make(map[raft.ServerID]time.Time)
		}
		w.st.lost[raft.ServerID(req.ID)] = now
	}
}

// step looks at raft once, wakes it if its leader has been silent long
// enough, and returns when to look again.
func (w *waker) step() time.Duration {
	st, ord := &w.st, &w.ord
	ht := w.ht
	switch w.raft.State() {
	case raft.Follower:
	case raft.Leader:
		*st, *ord = wakeState{}, wakeOrder{}
		w.setRaftHeartbeat(ht) // a leader heartbeats every HT/10..HT/5
		return ht / 4
	default:
		*st = wakeState{}
		return ht / 4
	}
	lc := w.raft.LastContact()
	leaderAddr, leaderID := w.raft.LeaderWithID()
	if lc.IsZero() || (leaderID == "" && st.contact.IsZero()) || leaderID == raft.ServerID(w.id) {
		st.peer, st.lost = time.Time{}, nil
		return ht / 4 // no leader heard of yet (raft's own timer handles a fresh start)
	}
	if leaderID != "" && leaderID != ord.leader {
		// A new leader: find this node's place and let raft's own timer
		// keep to it (see wakeOrder). A non-voter keeps raft's own timing.
		ord.leader = leaderID
		ord.place = w.place(leaderID)
		ord.heartbeat = ht
		if ord.place.voter {
			ord.heartbeat = ht + time.Duration(ord.place.rank)*w.spread()
		}
		w.setRaftHeartbeat(ord.heartbeat)
	}
	if !lc.Equal(st.contact) {
		peer, lost := st.peer, st.lost
		*st = wakeState{contact: lc, leaderID: leaderID, place: ord.place}
		if st.leaderID != ord.leader {
			st.place = w.place(st.leaderID)
		}
		if peer.After(lc) {
			st.peer = peer
		}
		for id, at := range lost {
			if at.After(lc) {
				if st.lost == nil {
					st.lost = make(map[raft.ServerID]time.Time)
				}
				st.lost[id] = at
			}
		}
	}
	if !st.place.voter || st.woke {
		return ht / 4 // a non-voter never wakes raft; a woken raft's own timers take it from here
	}
	since := time.Since(lc)
	probeAt := ht / 4
	next := time.Duration(0) // 0: none yet
	soonest := func(d time.Duration) {
		if next == 0 || d < next {
			next = d
		}
	}
	if since < probeAt {
		soonest(probeAt - since)
	} else if !st.probed {
		st.probed = true
		st.refused = w.refused(string(leaderAddr))
		// The probe may have waited for its dial (up to its timeout when
		// the leader's host is gone): the waits below count from now.
		since = time.Since(lc)
		if st.refused && st.place.rank < st.place.winner {
			w.announce(st.leaderID)
		}
	}
	if stand, wait := standOnRefused(st.place, st.refused, len(st.lost), since, probeAt, w.transferGap()); stand {
		st.woke = true
		w.transferSelf(lc, len(st.lost))
		return ht / 4
	} else if wait > 0 {
		soonest(wait)
	}
	floor := w.llt
	at := ht + time.Duration(st.place.rank)*w.spread()
	if !st.peer.IsZero() {
		gap := time.Duration(max(st.place.rank-st.place.winner, 0)) * w.preVoteGap()
		at = min(at, max(st.peer.Sub(lc), floor)+gap)
	}
	if since < at {
		soonest(at - since)
		return next
	}
	st.woke = true
	w.wakeRaft(lc, max(ord.heartbeat, ht))
	return ht / 4
}

// standOnRefused is the waker's decision for a follower at place p whose
// probe of its silent leader was refused (refused), lost other voters
// having asked for a pre-vote since its last contact, since after that
// contact: stand reports that it hands its raft a TimeoutNow now; wait,
// when positive, is how long until it may (zero: no time of its own, a
// pre-vote request brings the waker back). It stands only with evidence
// that a majority of the voters lost the leader (itself and lost make a
// quorum), only from the first follower that can win on in the wake order,
// and each later one gap after the one before it, counted from probeAt.
func standOnRefused(p place, refused bool, lost int, since, probeAt, gap time.Duration) (stand bool, wait time.Duration) {
	if !refused || !p.voter || p.rank < p.winner {
		return false, 0
	}
	at := probeAt + time.Duration(p.rank-p.winner)*gap
	switch {
	case 1+lost < p.quorum:
		// No evidence yet that a majority lost the leader: a pre-vote
		// request brings step back.
		return false, 0
	case since < at:
		return false, at - since
	}
	return true, 0
}

// transferSelf hands raft, through the channel it consumes RPCs from, the
// TimeoutNow request a leader sends to the target of a leadership transfer:
// raft becomes a candidate at once and its vote requests are marked as a
// transfer. It does nothing unless raft is still a follower that has heard
// nothing since lc. lost is the number of other voters that lost the
// leader too (for the log).
func (w *waker) transferSelf(lc time.Time, lost int) {
	if w.raft.State() != raft.Follower || !w.raft.LastContact().Equal(lc) {
		return
	}
	rpc := raft.RPC{
		Command: &raft.TimeoutNowRequest{RPCHeader: raft.RPCHeader{
			ProtocolVersion: raft.ProtocolVersionMax,
			ID:              []byte(w.id),
			Addr:            []byte(w.addr),
		}},
		RespChan: make(chan raft.RPCResponse, 1), // raft never blocks on it
	}
	select {
	case w.inbox <- rpc:
		w.log.Debug("wake: leader's port refused and a majority lost it, asked raft to stand now",
			"since-last-contact", time.Since(lc), "other-voters-lost-it", lost)
	case <-w.quit:
	}
}

// announce tells every other voter but the silent leader that this node
// lost it, with a RequestPreVote of its own (the request raft would send,
// for the next term): raft answers it as any pre-vote and changes nothing,
// and the receiving node's waker counts this node among those that lost
// the leader. The requests are sent in the background; the answers do not
// matter.
func (w *waker) announce(leader raft.ServerID) {
	f := w.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	var lastTerm uint64
	if t, err := strconv.ParseUint(w.raft.Stats()["last_log_term"], 10, 64); err == nil {
		lastTerm = t
	}
	req := &raft.RequestPreVoteRequest{
		RPCHeader: raft.RPCHeader{
			ProtocolVersion: raft.ProtocolVersionMax,
			ID:              []byte(w.id),
			Addr:            []byte(w.addr),
		},
		Term:         w.raft.CurrentTerm() + 1,
		LastLogIndex: w.raft.LastIndex(),
		LastLogTerm:  lastTerm,
	}
	var sent []string
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter || s.ID == leader || string(s.ID) == w.id {
			continue
		}
		sent = append(sent, string(s.ID))
		w.rpcs.Add(1)
		go func() {
			defer w.rpcs.Done()
			// A pooled connection to a peer that restarted fails at once
			// (raft's NetworkTransport reuses it unchecked, then drops
			// it): try the next one, up to a fresh dial.
			for range announceAttempts {
				var resp raft.RequestPreVoteResponse
				if err := w.tr.RequestPreVote(s.ID, s.Address, req, &resp); err == nil {
					return
				}
				select {
				case <-w.quit:
					return
				default:
				}
			}
		}()
	}
	w.log.Debug("wake: leader's port refused, told the other voters", "leader", string(leader), "to", sent)
}

// announceAttempts bounds the tries of one announcement: raft's
// NetworkTransport pools up to 3 connections per peer (transport.DefaultMaxPool),
// each of which may be dead, then dials.
const announceAttempts = 4

// wakeOrder is this follower's place in the wake order under its current
// leader. raft's own follower timer would otherwise fire on any follower
// from HeartbeatTimeout on, and a later follower whose timer fires in the
// very millisecond the first one wakes splits the pre-votes (measured: about
// one crash in fifty). So each follower also runs raft with its own wake
// time as HeartbeatTimeout — HT for the first, HT + spread() for the
// second, and so on (ElectionTimeout raised with it where needed, as raft
// requires ET >= HT) — and a leader runs with the configured one.
type wakeOrder struct {
	leader    raft.ServerID
	place     place
	heartbeat time.Duration // raft's HeartbeatTimeout for this place
}

// setRaftHeartbeat sets raft's HeartbeatTimeout to d, and its
// ElectionTimeout to the larger of the configured one and d.
func (w *waker) setRaftHeartbeat(d time.Duration) {
	rc := w.raft.ReloadableConfig()
	et := max(w.et, d)
	if rc.HeartbeatTimeout == d && rc.ElectionTimeout == et {
		return
	}
	rc.HeartbeatTimeout, rc.ElectionTimeout = d, et
	if err := w.raft.ReloadConfig(rc); err != nil {
		w.log.Warn("wake: setting HeartbeatTimeout failed", "heartbeat-timeout", d, "error", err)
	}
}

// rank returns this node's place among the voters other than the silent
// leader, ordered by ID, and the place of the first of them that can win:
// with the earlier ones it makes a quorum. A node that is not a voter has
// no place: rank -1.
func (w *waker) rank(leader raft.ServerID) (rank, winner int) {
	p := w.place(leader)
	if !p.voter {
		return -1, p.winner
	}
	return p.rank, p.winner
}

// place computes this node's place under leader from raft's latest
// configuration.
func (w *waker) place(leader raft.ServerID) place {
	f := w.raft.GetConfiguration()
	if f.Error() != nil {
		return place{}
	}
	var voters []raft.ServerID
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters = append(voters, s.ID)
		}
	}
	return placeAmong(voters, raft.ServerID(w.id), leader)
}

// placeAmong is the place of self under leader among voters (raft's
// configuration's voters, in any order).
func placeAmong(voters []raft.ServerID, self, leader raft.ServerID) place {
	var ids []string
	isVoter := false
	for _, id := range voters {
		if id == self {
			isVoter = true
		}
		if id != leader {
			ids = append(ids, string(id))
		}
	}
	slices.Sort(ids)
	p := place{voter: isVoter, quorum: len(voters)/2 + 1}
	p.rank = max(slices.Index(ids, string(self)), 0)
	p.winner = max(min(len(voters)/2, len(ids)-1), 0) // quorum voters/2+1, less this node
	return p
}

// refused probes addr once, within HT/4, and reports whether the
// connection was refused: nothing listens there for this node, or
// something on the way rejects it.
func (w *waker) refused(addr string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), w.ht/4)
	defer cancel()
	go func() { // stop cuts the probe short
		select {
		case <-w.quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := errProbeUnsupported
	if p, ok := w.tr.(transport.Prober); ok {
		err = p.Probe(ctx, raft.ServerAddress(addr))
	}
	if errors.Is(err, errProbeUnsupported) || errors.Is(err, transport.ErrCannotProbe) {
		// Not a transport that probes: dial host:port addresses directly.
		if _, _, serr := net.SplitHostPort(addr); serr != nil {
			return false
		}
		var d net.Dialer
		var c net.Conn
		if c, err = d.DialContext(ctx, "tcp", addr); err == nil {
			_ = c.Close()
		}
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// errProbeUnsupported stands for a transport that is no transport.Prober.
var errProbeUnsupported = errors.New("election: transport cannot probe")

// wakeRaft makes raft's follower loop check its last contact now: it lowers
// HeartbeatTimeout (which fires the follower's timer at once), waits until
// raft has left the follower state or heard from a leader again, and
// restores the configured HeartbeatTimeout.
func (w *waker) wakeRaft(lc time.Time, restore time.Duration) {
	low, ok := w.lowHeartbeat()
	if !ok {
		return
	}
	rc := w.raft.ReloadableConfig()
	rc.HeartbeatTimeout = low
	if err := w.raft.ReloadConfig(rc); err != nil {
		w.log.Debug("wake: lowering HeartbeatTimeout failed", "error", err)
		return
	}
	w.log.Debug("wake: leader silent, woke raft", "since-last-contact", time.Since(lc))
	deadline := time.NewTimer(w.ht)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
wait:
	for w.raft.State() == raft.Follower && w.raft.LastContact().Equal(lc) {
		select {
		case <-w.quit:
			break wait
		case <-deadline.C:
			break wait
		case <-tick.C: // poll interval
		}
	}
	w.setRaftHeartbeat(restore)
}
