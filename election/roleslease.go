package election

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Role leases (docs/DESIGN.md, "Leases and the renewal channel").
//
// RoleLease is the leader's bound B: it moves the roles of a member it has
// not granted a renewal for B (on its clock). The member holds its roles
// for H = 4B/5 (on its own clock) from the send time of a renewal the
// leader granted; the margin B − H covers clock drift within the documented
// assumption (±10 %; H·(1+ρ) ≤ B·(1−ρ) for every ρ ≤ 1/9). B plays the
// part of an etcd lease's TTL: a dead member's roles move about B after
// its last renewal.
//
// Each member runs one renewal loop, whatever the number of roles: every
// 2H/5 (so one renewal may be lost: the next still comes H/5 before the
// hold lapses), and at once when it applies an entry that takes a role from
// it, it sends its leader a renewal — a RequestPreVote with term 0, which
// raft never sends — carrying its applied role index and its flags. The
// leader's forward loop hands such a request to the renewal service
// instead of to admission and raft. The service answers a batch of
// renewals only after a proof round (proveLeader) begun after they all arrived;
// the member counts its lease from its own send time of a renewal the
// leader granted. The leader renews itself with every batch it serves, as
// if it had sent itself a renewal as the batch's round began, and skips its
// own timed renewal while that keeps its lease fresh: its renewals cost no
// proof round of their own.

// renewFlagNoRoles marks a renewal from a member whose Config.NoRoles is
// set.
const renewFlagNoRoles = 1

// renewFlagProbe marks a leader's proof probe instead of a renewal: its
// LastLogIndex carries the leader's term, and the receiver grants it iff
// its own current term is that term (see proveLeader).
const renewFlagProbe = 2

// roles is one Election's role machinery.
type roles struct {
	e       *Election
	t       *roleTable
	clk     func() time.Duration
	bound   time.Duration // B = Config.RoleLease: the leader's reassignment bound
	hold    time.Duration // H = holdOf(B): how long a member holds after a granted renewal's send
	noRoles bool
	// noBalance, set by measurements only, stops the balance rule, so a
	// member can be given exactly k roles.
	noBalance atomic.Bool

	// Member side: this member's lease holds while clk() < lease.until.
	lease   atomic.Pointer[leaseState]
	renewCh chan struct{} // poke: renew now
	lapseCh chan struct{} // poke: the lease was extended (lapseLoop)
	// epochHook, set by tests only, runs inside RoleEpoch between its read
	// of the grant and its read of the lease.
	epochHook atomic.Pointer[func()]
	// proofHook, set by tests only, runs in proveLeader once the probes
	// are sent.
	proofHook atomic.Pointer[func()]
	// applyHook, set by tests only, runs in leaderApply right after the
	// entry is issued.
	applyHook atomic.Pointer[func()]

	// Leader side.
	mu       sync.Mutex
	ls       leaderState
	pending  []renewal
	lastPass passKey       // the assigner's last full pass (only the assigner uses it)
	serveCh  chan struct{} // poke: a renewal is pending
	assignCh chan struct{} // poke: run the assigner
}

// leaderState is what a leader knows about the members in one term: not
// replicated, rebuilt by each new leader.
type leaderState struct {
	term    uint64        // the confirmed term it belongs to; 0: not serving
	tc      time.Duration // when this leader became ready (its election, on its clock)
	members map[string]*memberView
	prefer  map[string]string // role -> handover target (MoveRole, balance)
}

// memberView is a leader's record of one member.
type memberView struct {
	lastRenew time.Duration // receipt time of the latest renewal granted
	renewed   bool          // a renewal was granted in this term
	noRoles   bool
	applied   uint64 // the highest applied role index it reported
	blocked   int    // entries being appended that take a role from it
	mustApply uint64 // the latest such entry's index
}

// leaseState is a member's role lease: it holds while clk() < until. gen
// counts the holds: it goes up whenever the lease is extended after it had
// lapsed, so (grant, gen) names one unbroken hold of one grant (LeadRole
// runs its function once per such hold).
type leaseState struct {
	until time.Duration
	gen   uint64
}

// renewal is one pending renewal request.
type renewal struct {
	id, addr string
	applied  uint64
	flags    uint64
	recv     time.Duration
	answer   func(granted bool, term uint64)
}

func newRoles(e *Election, c Config) *roles {
	clk := c.roleClock
	if clk == nil {
		clk = monoClock()
	}
	rs := &roles{
		e:        e,
		t:        newRoleTable(),
		clk:      clk,
		bound:    c.RoleLease,
		hold:     holdOf(c.RoleLease),
		noRoles:  c.NoRoles,
		renewCh:  make(chan struct{}, 1),
		lapseCh:  make(chan struct{}, 1),
		serveCh:  make(chan struct{}, 1),
		assignCh: make(chan struct{}, 1),
	}
	rs.lease.Store(&leaseState{})
	if c.roleLimit > 0 {
		rs.t.limit = c.roleLimit
	}
	return rs
}

// holdOf is a member's hold H for the leader's bound B: 4/5 of it. A
// member's hold ends no later in real time than the leader's bound starts
// while every clock runs within ±10 % of real time: H/(1−ρ) ≤ B/(1+ρ)
// for ρ ≤ 1/9 (docs/DESIGN.md, "Clock assumption";
// TestRolesDriftWithinAssumption).
func holdOf(bound time.Duration) time.Duration { return bound / 5 * 4 }

// renewEvery is a member's renewal interval: 2/5 of its hold, so a hold
// survives one lost renewal (the next is sent H/5 before it lapses). It is
// most of the idle cost of roles (a renewal and a proof round per
// follower each interval), and the kill-to-move time of a member's roles
// is B less the time since its last renewal, so a longer interval is both
// cheaper and, on average, faster to fail over.
func (rs *roles) renewEvery() time.Duration { return max(rs.hold/5*2, time.Millisecond) }

// leaseHolds reports whether this member's role lease holds now (R3).
func (rs *roles) leaseHolds() bool {
	_, ok := rs.leaseNow()
	return ok
}

// leaseNow returns the lease's hold count and whether it holds now.
func (rs *roles) leaseNow() (gen uint64, holds bool) {
	l := rs.lease.Load()
	return l.gen, rs.clk() < l.until
}

// leaseUntil returns when the lease lapses on the role clock.
func (rs *roles) leaseUntil() time.Duration { return rs.lease.Load().until }

// start runs the member's renewal loop and lapse watch and the leader's
// service, leader watch and assigner: five goroutines per Election, none
// per role.
func (rs *roles) start() {
	e := rs.e
	rs.t.onApply = rs.applied
	e.wg.Add(5)
	go rs.renewLoop()
	go rs.lapseLoop()
	go rs.serveLoop()
	go rs.leaderLoop()
	go rs.assignLoop()
}

// applied runs after every role entry this node applies.
func (rs *roles) applied(index uint64, ent *roleEntry) {
	if rs.t.taken(rs.e.cfg.ID) == index && index != 0 {
		poke(rs.renewCh) // report at once that the loss is applied (handover)
	}
	if ent != nil {
		for _, o := range ent.Set {
			if o == rs.e.cfg.ID && !rs.leaseHolds() {
				poke(rs.renewCh)
				break
			}
		}
	}
	poke(rs.assignCh)
}

// renewLoop renews this member's lease every renewEvery, counted from the
// send time of its latest renewal (not from the answer: at a round trip of
// a fifth of the interval, counting from the answer would send every
// renewal that much later, and a lost one would leave too little of the
// hold for the next) — and on every poke. A leader counts from the send
// time of the latest granted renewal instead, so that the batches it
// serves, which renew it too, spare it its own.
func (rs *roles) renewLoop() {
	e := rs.e
	defer e.wg.Done()
	interval := rs.renewEvery()
	timer := time.NewTimer(0)
	defer timer.Stop()
	lastSend, sent := time.Duration(0), false
	for {
		poked := false
		select {
		case <-e.stop:
			return
		case <-timer.C:
		case <-rs.renewCh:
			poked = true
		}
		// fresh: how long until the latest granted renewal's send is an
		// interval old (a leader's batches renew it between its own).
		fresh := func() time.Duration {
			if until := rs.leaseUntil(); until != 0 {
				return until - rs.hold + interval - rs.clk()
			}
			return 0
		}
		_, leads := e.held()
		if poked || !leads || fresh() <= 0 {
			if s, ok := rs.renewOnce(); ok {
				lastSend, sent = s, true
			}
		}
		now := rs.clk()
		next := interval
		if sent {
			next = lastSend + interval - now
		}
		if _, leads := e.held(); leads {
			next = min(interval, fresh())
		}
		// At least an eighth of an interval: a slow renewal (an RPC that
		// timed out) or a clock that runs slow (tests) must not spin this
		// loop.
		next = max(next, interval/8)
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
	}
}

// lapseLoop wakes the role table's waiters (LeadRole, ObserveRoles) the
// moment this member's lease lapses, on a timer of its own: the renewal
// loop may be waiting for an RPC then, up to the transport's timeout.
func (rs *roles) lapseLoop() {
	e := rs.e
	defer e.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	held := false
	for {
		l := rs.lease.Load()
		now := rs.clk()
		h := now < l.until
		if h != held {
			held = h
			rs.t.broadcast()
		}
		next := time.Hour
		if h {
			// The role clock may run at another rate than the timer's
			// (tests): wake, look, and wait again, never in a spin.
			next = max(l.until-now, time.Millisecond)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
		select {
		case <-e.stop:
			return
		case <-timer.C:
		case <-rs.lapseCh:
		}
	}
}

// renewOnce sends one renewal to the leader this node knows and extends the
// lease if the leader granted it. It returns the renewal's send time, and
// false if it sent none (no roles, no leader known).
func (rs *roles) renewOnce() (time.Duration, bool) {
	e := rs.e
	if rs.t.empty() {
		// No roles: a group that uses none pays nothing (no renewals, no
		// proof rounds). The first role entry applied pokes the loop.
		return 0, false
	}
	addr, id := e.raft.LeaderWithID()
	if id == "" {
		return 0, false
	}
	flags := rs.flags()
	applied := rs.t.applied()
	s := rs.clk() // the send time: the lease counts from here
	var granted bool
	if string(id) == e.cfg.ID {
		done := make(chan bool, 1)
		rs.enqueue(renewal{id: e.cfg.ID, addr: e.localAddr, applied: applied, flags: flags, recv: s,
			answer: func(g bool, _ uint64) { done <- g }})
		select {
		case granted = <-done:
		case <-e.stop:
			return s, true
		}
	} else {
		req := &raft.RequestPreVoteRequest{
			RPCHeader:    raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(e.cfg.ID), Addr: []byte(e.localAddr)},
			Term:         0, // marks a renewal: raft never asks for term 0
			LastLogIndex: applied,
			LastLogTerm:  flags,
		}
		var resp raft.RequestPreVoteResponse
		if err := e.cfg.Transport.RequestPreVote(id, addr, req, &resp); err != nil {
			e.log.Debug("roles: renewal failed", "leader", id, "error", err)
			return s, true
		}
		granted = resp.Granted
	}
	if granted {
		rs.extend(s)
	}
	return s, true
}

// extend extends this member's lease to s + H for a granted renewal sent
// at s. An extension of a lease that had lapsed starts a new hold (gen + 1)
// and wakes the role table's waiters.
func (rs *roles) extend(s time.Duration) {
	until := s + rs.hold
	for {
		old := rs.lease.Load()
		if until <= old.until {
			return
		}
		now := rs.clk()
		nl := &leaseState{until: until, gen: old.gen}
		started := now >= old.until
		if started {
			nl.gen++
		}
		if rs.lease.CompareAndSwap(old, nl) {
			if started && now < until {
				rs.t.broadcast() // a hold started: LeadRole, ObserveRoles
			}
			poke(rs.lapseCh)
			return
		}
	}
}

// selfRenewal is the leader's renewal of itself sent as a batch's round
// begins (see serveLoop).
func (rs *roles) selfRenewal() renewal {
	s := rs.clk()
	return renewal{id: rs.e.cfg.ID, addr: rs.e.localAddr, applied: rs.t.applied(), flags: rs.flags(), recv: s,
		answer: func(g bool, _ uint64) {
			if g {
				rs.extend(s)
			}
		}}
}

func (rs *roles) flags() uint64 {
	if rs.noRoles {
		return renewFlagNoRoles
	}
	return 0
}

// intercept takes a renewal out of the RPC stream before admission and
// raft; it reports whether rpc was one.
func (rs *roles) intercept(rpc raft.RPC) bool {
	req, ok := rpc.Command.(*raft.RequestPreVoteRequest)
	if !ok || req.Term != 0 {
		return false
	}
	if req.LastLogTerm == renewFlagProbe {
		rs.answerProbe(rpc, req.LastLogIndex)
		return true
	}
	rs.enqueue(renewal{
		id: string(req.ID), addr: string(req.Addr), applied: req.LastLogIndex, flags: req.LastLogTerm, recv: rs.clk(),
		answer: func(g bool, term uint64) {
			// A refused renewal is refused on the wire too (an error, as
			// admission refuses an RPC): a forged one, from a stranger or
			// in a member's name, must not look admitted (the fault
			// suite's hostile peer counts an answer without an error as
			// admitted).
			var err error
			if !g {
				err = errRenewalRefused
			}
			rpc.Respond(&raft.RequestPreVoteResponse{
				RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(rs.e.cfg.ID), Addr: []byte(rs.e.localAddr)},
				Term:      term, Granted: g,
			}, err)
		},
	})
	return true
}

// errRenewalRefused answers a role renewal the leader did not grant.
var errRenewalRefused = errors.New("election: role renewal refused")

// errProbeRefused answers a leader's probe for a term that is not this
// node's current term.
var errProbeRefused = errors.New("election: role probe refused: another term")

// answerProbe answers a leader's probe for term at once: granted iff this
// node's current term is term. A node that voted in a later term has
// moved to it first (raft persists the term before it votes), so a granted
// answer says this node had helped elect no newer leader when it answered.
func (rs *roles) answerProbe(rpc raft.RPC, term uint64) {
	cur := rs.e.raft.CurrentTerm()
	ok := cur == term && cur != 0
	var err error
	if !ok {
		err = errProbeRefused
	}
	rpc.Respond(&raft.RequestPreVoteResponse{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(rs.e.cfg.ID), Addr: []byte(rs.e.localAddr)},
		Term:      cur, Granted: ok,
	}, err)
}

// proveLeader reports whether this node, leader of term, was still the
// newest leader when it was called: a quorum of the latest configuration's
// voters (itself included) answered a probe sent now with term as their
// current term. Any newer leader was voted in by a quorum that moved to a
// later term before voting; the two quorums share a voter, whose answer
// was given after this call began and still named term — so that newer
// leader was elected after this call began.
//
// It is not raft's VerifyLeader: that counts every successful answer that
// arrives during its round, including late answers to heartbeats sent
// before the round began, so a deposed leader whose old answers trickle in
// stays "verified" (docs/DESIGN.md; TestRaftVerifyLeaderCountsLateAnswers).
func (rs *roles) proveLeader(term uint64) bool {
	e := rs.e
	servers, err := e.configuration()
	if err != nil {
		return false
	}
	var others []raft.Server
	n, acks := 0, 0
	for _, s := range servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		n++
		if string(s.ID) == e.cfg.ID {
			acks++
		} else {
			others = append(others, s)
		}
	}
	quorum := n/2 + 1
	if n == 0 || acks >= quorum {
		return n > 0
	}
	res := make(chan bool, len(others))
	for _, s := range others {
		e.wg.Add(1) // serveLoop is counted: the count is above zero
		go func() {
			defer e.wg.Done()
			res <- rs.probe(s, term)
		}()
	}
	if h := rs.proofHook.Load(); h != nil {
		(*h)()
	}
	for range others {
		select {
		case ok := <-res:
			if ok {
				if acks++; acks >= quorum {
					return true
				}
			}
		case <-e.stop:
			return false
		}
	}
	return false
}

// probe sends s one probe for term and reports whether s granted it.
func (rs *roles) probe(s raft.Server, term uint64) bool {
	e := rs.e
	req := &raft.RequestPreVoteRequest{
		RPCHeader:    raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(e.cfg.ID), Addr: []byte(e.localAddr)},
		Term:         0, // a renewal-shaped request: raft never sends term 0
		LastLogIndex: term,
		LastLogTerm:  renewFlagProbe,
	}
	var resp raft.RequestPreVoteResponse
	if err := e.cfg.Transport.RequestPreVote(s.ID, s.Address, req, &resp); err != nil {
		return false
	}
	return resp.Granted && resp.Term == term
}

func (rs *roles) enqueue(r renewal) {
	rs.mu.Lock()
	rs.pending = append(rs.pending, r)
	rs.mu.Unlock()
	poke(rs.serveCh)
}

// serveLoop answers renewals in batches: each batch after one proof round
// (proveLeader) begun after every renewal in it arrived.
func (rs *roles) serveLoop() {
	e := rs.e
	defer e.wg.Done()
	for {
		select {
		case <-e.stop:
			rs.answerAll(rs.take(), false)
			return
		case <-rs.serveCh:
		}
		batch := rs.take()
		if len(batch) == 0 {
			continue
		}
		rs.mu.Lock()
		term := rs.ls.term
		rs.mu.Unlock()
		if t, ok := e.held(); term == 0 || !ok || t != term {
			rs.answerAll(batch, false)
			continue
		}
		self := slices.ContainsFunc(batch, func(r renewal) bool { return r.id == e.cfg.ID })
		if !self && !rs.t.empty() {
			batch = append(batch, rs.selfRenewal())
		}
		if !rs.proveLeader(term) {
			rs.answerAll(batch, false)
			continue
		}
		rs.decide(batch, term)
	}
}

func (rs *roles) take() []renewal {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	b := rs.pending
	rs.pending = nil
	return b
}

func (rs *roles) answerAll(b []renewal, granted bool) {
	t := rs.e.raft.CurrentTerm()
	for _, r := range b {
		r.answer(granted, t)
	}
}

// decide grants or refuses each renewal of a verified batch (the rules of
// docs/DESIGN.md: leader of term, member at its address, loss applied).
func (rs *roles) decide(batch []renewal, term uint64) {
	e := rs.e
	servers, _ := e.configuration()
	addrOf := make(map[string]string, len(servers))
	for _, s := range servers {
		addrOf[string(s.ID)] = string(s.Address)
	}
	grant := make([]bool, len(batch))
	wake := false
	rs.mu.Lock()
	t, ok := e.held()
	if ok && t == term && rs.ls.term == term {
		for i, r := range batch {
			// Not a member (at that address): nothing of it is kept, so
			// that forged renewals neither grow the table nor move a
			// member's applied index.
			if a, ok := addrOf[r.id]; !ok || a != r.addr {
				continue
			}
			m := rs.ls.members[r.id]
			if m == nil {
				m = &memberView{}
				rs.ls.members[r.id] = m
			}
			if r.applied > m.applied {
				m.applied = r.applied
				wake = true // a handover may be waiting for it
			}
			if m.blocked > 0 || r.applied < m.mustApply || r.applied < rs.t.taken(r.id) {
				continue // R5: it has not applied the loss of a role
			}
			noRoles := r.flags&renewFlagNoRoles != 0
			if !m.renewed || m.noRoles != noRoles {
				wake = true
			}
			m.renewed, m.noRoles = true, noRoles
			if r.recv > m.lastRenew {
				m.lastRenew = r.recv
			}
			grant[i] = true
		}
	}
	rs.mu.Unlock()
	for i, r := range batch {
		r.answer(grant[i], term)
	}
	if wake {
		poke(rs.assignCh)
	}
}

// leaderLoop follows this node's leadership: when it holds a newly
// confirmed epoch it waits for its own term's entry to be applied (a
// Barrier: the role table then holds every committed entry), starts
// serving renewals with every member counted as renewed now (R4, R6), and
// adds the roles of Config.Roles the table lacks.
func (rs *roles) leaderLoop() {
	e := rs.e
	defer e.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-e.stop
		cancel()
	}()
	updates := e.hub.subscribe(ctx)
	var retry <-chan time.Time
	for {
		select {
		case _, ok := <-updates:
			if !ok {
				return
			}
		case <-retry:
		}
		retry = nil
		t, leading := e.held()
		rs.mu.Lock()
		cur := rs.ls.term
		if !leading || t != cur {
			rs.ls = leaderState{}
		}
		rs.mu.Unlock()
		if !leading || t == cur {
			continue
		}
		if err := e.wait(ctx, e.raft.Barrier(0)); err != nil {
			if t2, ok := e.held(); ok && t2 == t {
				retry = time.After(e.retryInterval())
			}
			continue
		}
		if t2, ok := e.held(); !ok || t2 != t {
			continue
		}
		rs.mu.Lock()
		rs.ls = leaderState{term: t, tc: rs.clk(), members: make(map[string]*memberView), prefer: make(map[string]string)}
		rs.mu.Unlock()
		e.log.Debug("roles: serving renewals", "term", t)
		if missing := rs.missingRoles(); len(missing) > 0 {
			if err := rs.leaderApply(ctx, &roleEntry{Add: missing}, nil, nil); err != nil {
				e.log.Debug("roles: adding Config.Roles failed", "error", err)
			}
		}
		poke(rs.assignCh)
	}
}

func (rs *roles) missingRoles() []string {
	var missing []string
	for _, r := range rs.e.cfg.Roles {
		if _, ok := rs.t.get(r); !ok {
			missing = append(missing, r)
		}
	}
	return missing
}

func (rs *roles) setPrefer(r, to string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.ls.prefer != nil {
		rs.ls.prefer[r] = to
	}
}

// leaderApply appends ent as this term's leader, with every member of
// from blocked from renewal until it reports the entry applied (R5); it
// returns once the entry is applied here, or when ctx ends.
//
// It leaves nothing behind, whatever ctx does: an ended ctx appends
// nothing and blocks nobody; once the entry is issued, the blocks end when
// raft resolves it, not when the caller stops waiting — applied: each
// member then must report it applied before its next renewal; failed: it
// was not committed in this term (a later leader that commits it starts
// with its own state, and its Barrier makes its table hold the entry), so
// the blocks simply end and undo, if set, runs under rs.mu. Cancelling ctx
// stops the wait, not the commit.
func (rs *roles) leaderApply(ctx context.Context, ent *roleEntry, from []string, undo func()) error {
	e := rs.e
	if e.closed.Load() {
		return ErrClosed
	}
	data, err := jsonMarshal(ent)
	if err != nil {
		return err
	}
	rs.mu.Lock()
	if err := ctx.Err(); err != nil {
		if undo != nil {
			undo()
		}
		rs.mu.Unlock()
		return err // nothing issued
	}
	term := rs.ls.term
	if t, ok := e.held(); !ok || term == 0 || t != term {
		if undo != nil {
			undo()
		}
		rs.mu.Unlock()
		return e.notLeader()
	}
	for _, id := range from {
		rs.blockLocked(id)
	}
	rs.mu.Unlock()
	f := e.raft.ApplyLog(raft.Log{Data: data, Extensions: []byte(rolesExtension)}, 0)
	if h := rs.applyHook.Load(); h != nil {
		(*h)()
	}
	res := make(chan error, 1)
	go func() {
		err := e.wait(context.Background(), f) // ends with raft's answer, or at Close
		var idx uint64
		if err == nil {
			idx = f.Index()
		}
		rs.mu.Lock()
		for _, id := range from {
			rs.unblockLocked(id, term, idx)
		}
		if err != nil && undo != nil {
			undo()
		}
		rs.mu.Unlock()
		if errors.Is(err, raft.ErrRaftShutdown) && e.closed.Load() {
			err = ErrClosed
		}
		res <- e.configErr("role entry", err)
	}()
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-e.stop:
		return ErrClosed
	}
}

func (rs *roles) blockLocked(id string) {
	m := rs.ls.members[id]
	if m == nil {
		m = &memberView{}
		rs.ls.members[id] = m
	}
	m.blocked++
}

// unblockLocked ends one block of id set in term, once raft resolved the
// entry that set it: idx is the entry's index if it was applied, 0 if it
// failed.
func (rs *roles) unblockLocked(id string, term, idx uint64) {
	if rs.ls.term != term {
		return
	}
	m := rs.ls.members[id]
	if m == nil {
		return
	}
	m.blocked--
	if idx > m.mustApply {
		m.mustApply = idx
	}
}

// apply appends one role entry and waits until it is applied here.
func (rs *roles) apply(ctx context.Context, ent *roleEntry) (uint64, error) {
	e := rs.e
	data, err := jsonMarshal(ent)
	if err != nil {
		return 0, err
	}
	var idx uint64
	err = e.await(ctx, func() raft.Future {
		f := e.raft.ApplyLog(raft.Log{Data: data, Extensions: []byte(rolesExtension)}, 0)
		return indexFuture{f, &idx}
	})
	if err := e.configErr("role entry", err); err != nil {
		return 0, err
	}
	return idx, nil
}

// indexFuture records the index of an ApplyFuture once it has resolved.
type indexFuture struct {
	raft.ApplyFuture
	idx *uint64
}

func (f indexFuture) Error() error {
	err := f.ApplyFuture.Error()
	if err == nil {
		*f.idx = f.ApplyFuture.Index()
	}
	return err
}
