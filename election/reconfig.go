package election

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/epoch"
)

// Membership changes that cannot cost the cluster its quorum.
//
// raft v1.7.2's AddVoter makes a server a voter at once: the quorum grows
// with the change's entry, before the new server has answered anything. A
// server that is not running yet, or that was given a wrong address, then
// counts as a voter that never votes, and a cluster that already had one
// voter down (three voters, one dead, a fourth added to replace it) needs
// three of four votes with two to give: it never elects again, and no
// membership change can undo it, since each needs a leader.
//
// So a voter is added the way etcd adds a learner: first as a non-voter
// (which changes no quorum), then, once this leader has seen that the
// server answers and that its log holds what the leader had committed, it
// is promoted by a second change that is conditional on the first (raft's
// prevIndex). And every change that makes or removes a voter is refused
// unless the configuration it makes has a quorum of voters this leader can
// reach right now (etcd's strict reconfiguration check). Reachability and
// progress come from a probe: an AppendEntries with no entries and no
// commit index, at the term this leader won, which any follower answers
// with the last index of its log (raft v1.7.2 exports no follower progress
// of its own). A probe changes nothing on the follower but the time it
// last heard from its leader.
//
// Catching up is judged on the log, not on what the server applied: a
// server whose log holds the committed entries can vote and count towards
// a commit at once, which is all a quorum needs.

var (
	// ErrQuorumAtRisk is matched by the *ChangeError of a membership
	// change refused because the configuration it would make has fewer
	// voters that this leader can reach right now than a quorum of it. The
	// configuration is left as it was. Start (or reconnect) the unreachable
	// voters the error names, or remove dead voters first.
	ErrQuorumAtRisk = errors.New("election: the change would leave fewer reachable voters than a quorum")

	// ErrNotCaughtUp is matched by the *ChangeError of AddVoter, AddMember
	// or ReplaceServer when the server to be made a voter did not answer
	// this leader, or its log did not reach the leader's commit index,
	// before ctx ended. AddVoter leaves it a non-voter (which costs no
	// quorum): call it again once the server runs at that address, or
	// remove it. ReplaceServer removes the non-voter it added and leaves the
	// old voter in place.
	ErrNotCaughtUp = errors.New("election: the new server has not caught up")
)

// ChangeState says how far a membership change that did not commit got.
type ChangeState uint8

const (
	// ChangeRefused: nothing was handed to raft for this step; the
	// configuration is as it was before it.
	ChangeRefused ChangeState = iota + 1
	// ChangeInFlight: the change was handed to raft but this node could not
	// see it commit (ctx ended, or leadership was lost). It may still
	// commit: it is decided once the cluster's commit index reaches
	// ChangeError.Index; read Members from the leader then.
	ChangeInFlight
)

func (s ChangeState) String() string {
	switch s {
	case ChangeRefused:
		return "refused"
	case ChangeInFlight:
		return "in flight"
	}
	return fmt.Sprintf("change_state_%d", uint8(s))
}

// ChangeError is the error of a membership change (AddMember, AddVoter,
// RemoveServer, ReplaceServer) that did not commit. A nil error means the
// change committed. It matches the error in Err (ErrQuorumAtRisk,
// ErrNotCaughtUp, ErrNotLeader, a context's error, ...).
type ChangeError struct {
	Op    string      // the step, e.g. "promote n4 to voter", "remove n3"
	State ChangeState // refused or in flight
	// Index is, for a change in flight, the log index to wait for: once
	// the cluster's commit index reaches it the change either committed or
	// never will. Zero for a refused change.
	Index uint64
	Err   error
}

// Error implements error.
func (e *ChangeError) Error() string {
	if e.State == ChangeInFlight {
		return fmt.Sprintf("election: %s: in flight (it may still commit; decided once the commit index reaches %d): %v", e.Op, e.Index, e.Err)
	}
	return fmt.Sprintf("election: %s: %s: %v", e.Op, e.State, e.Err)
}

// Unwrap returns Err.
func (e *ChangeError) Unwrap() error { return e.Err }

// quorumError is the refusal of a change whose configuration would lack a
// reachable quorum; it names the voters this leader could not reach.
type quorumError struct {
	voters, reachable int
	unreachable       []string
}

func (q *quorumError) Error() string {
	return fmt.Sprintf("%s: %d of the %d voters it would have are reachable, a quorum is %d (unreachable: %s)",
		ErrQuorumAtRisk, q.reachable, q.voters, q.voters/2+1, strings.Join(q.unreachable, ", "))
}

func (q *quorumError) Unwrap() error { return ErrQuorumAtRisk }

// checkQuorum is the strict reconfiguration rule: the voters of next (a
// proposed configuration) must include a quorum (more than half) that
// reachable reports reachable. It is pure: the probes are made before.
func checkQuorum(next []raft.Server, reachable func(id string) bool) error {
	voters, ok := 0, 0
	var down []string
	for _, s := range next {
		if s.Suffrage != raft.Voter {
			continue
		}
		voters++
		if reachable(string(s.ID)) {
			ok++
		} else {
			down = append(down, string(s.ID))
		}
	}
	if voters == 0 || ok < voters/2+1 {
		return &quorumError{voters: voters, reachable: ok, unreachable: down}
	}
	return nil
}

// withVoter returns servers with id a voter at addr (added or promoted).
func withVoter(servers []raft.Server, id, addr string) []raft.Server {
	out := make([]raft.Server, 0, len(servers)+1)
	found := false
	for _, s := range servers {
		if string(s.ID) == id {
			s.Suffrage, found = raft.Voter, true
		}
		out = append(out, s)
	}
	if !found {
		out = append(out, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(addr), Suffrage: raft.Voter})
	}
	return out
}

// withoutServer returns servers without id.
func withoutServer(servers []raft.Server, id string) []raft.Server {
	out := make([]raft.Server, 0, len(servers))
	for _, s := range servers {
		if string(s.ID) != id {
			out = append(out, s)
		}
	}
	return out
}

// probeWait bounds one round of probes: a live follower answers an empty
// AppendEntries at once, so the bound only matters for one that does not.
func (e *Election) probeWait() time.Duration {
	return max(4*e.cfg.ElectionTimeout, time.Second)
}

// leaderTerm returns the term this node won and leads in now, or a
// *NotLeaderError.
func (e *Election) leaderTerm() (uint64, error) {
	ep, err := e.Epoch()
	if err != nil {
		if e.closed.Load() {
			return 0, ErrClosed
		}
		return 0, e.notLeader()
	}
	return ep.Term, nil
}

// probe sends the server id at addr an AppendEntries with no entries, no
// commit index and no previous entry, at term (a term this node won), and
// returns the last index of the server's log. It fails if the server does
// not answer within ctx, answers with a newer term, or refuses.
func (e *Election) probe(ctx context.Context, term uint64, id, addr string) (uint64, error) {
	tr := e.cfg.Transport
	req := &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{
			ProtocolVersion: raft.ProtocolVersionMax,
			ID:              []byte(e.cfg.ID),
			Addr:            tr.EncodePeer(raft.ServerID(e.cfg.ID), raft.ServerAddress(e.localAddr)),
		},
		Term: term,
	}
	type answer struct {
		resp raft.AppendEntriesResponse
		err  error
	}
	done := make(chan answer, 1)
	if e.closed.Load() {
		return 0, ErrClosed
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		var a answer
		a.err = tr.AppendEntries(raft.ServerID(id), raft.ServerAddress(addr), req, &a.resp)
		done <- a
	}()
	select {
	case a := <-done:
		switch {
		case a.err != nil:
			return 0, a.err
		case a.resp.Term > term:
			return 0, fmt.Errorf("it is at term %d, above this leader's %d", a.resp.Term, term)
		case !a.resp.Success:
			return 0, errors.New("it did not accept this leader")
		}
		return a.resp.LastLog, nil
	case <-ctx.Done():
		return 0, fmt.Errorf("no answer: %w", ctx.Err())
	case <-e.stop:
		return 0, ErrClosed
	}
}

// reachableVoters probes, at once, every voter of servers but this node
// and returns who answered within probeWait (this node counts as
// reachable).
func (e *Election) reachableVoters(ctx context.Context, term uint64, servers []raft.Server) func(string) bool {
	ctx, cancel := context.WithTimeout(ctx, e.probeWait())
	defer cancel()
	type result struct {
		id string
		ok bool
	}
	var n int
	res := make(chan result, len(servers))
	for _, s := range servers {
		if s.Suffrage != raft.Voter || string(s.ID) == e.cfg.ID {
			continue
		}
		n++
		go func(id, addr string) {
			_, err := e.probe(ctx, term, id, addr)
			if err != nil {
				e.log.Debug("membership check: voter unreachable", "id", id, "addr", addr, "error", err)
			}
			res <- result{id, err == nil}
		}(string(s.ID), string(s.Address))
	}
	ok := map[string]bool{e.cfg.ID: true}
	for range n {
		r := <-res
		ok[r.id] = r.ok
	}
	return func(id string) bool { return ok[id] }
}

// waitCaughtUp probes the server id at addr, every half heartbeat, until
// its log holds what this leader had committed one probe earlier (on the
// first probe: what it had committed when it sent it), or ctx ends
// (ErrNotCaughtUp, with the last reason). One probe of slack: under a
// steady stream of writes a follower that keeps up is still an entry or
// two behind the commit index at any instant, and comparing with the
// instant would never promote it.
func (e *Election) waitCaughtUp(ctx context.Context, id, addr string) error {
	every := max(e.cfg.HeartbeatTimeout/2, 5*time.Millisecond)
	var last error
	var prev uint64
	for first := true; ; first = false {
		term, err := e.leaderTerm()
		if err != nil {
			return err
		}
		now := e.raft.CommitIndex()
		target := prev
		if first {
			target = now
		}
		prev = now
		pctx, cancel := context.WithTimeout(ctx, e.probeWait())
		got, err := e.probe(pctx, term, id, addr)
		cancel()
		switch {
		case err == nil && got >= target:
			return nil
		case err == nil:
			last = fmt.Errorf("its log ends at %d, below the leader's commit index %d", got, target)
		case errors.Is(err, ErrClosed):
			return err
		default:
			last = fmt.Errorf("unreachable at %s: %v", addr, err)
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: %s: %w", ErrNotCaughtUp, last, ctx.Err())
		case <-e.stop:
			t.Stop()
			return ErrClosed
		case <-t.C:
		}
	}
}

// change hands raft one membership change and waits for it to commit. A
// nil error: committed; otherwise a *ChangeError, refused when nothing
// reached raft, in flight when it did and its outcome is unknown. It
// returns the change's index when it committed.
func (e *Election) change(ctx context.Context, op string, issue func() raft.IndexFuture) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, &ChangeError{Op: op, State: ChangeRefused, Err: err}
	}
	if e.closed.Load() {
		return 0, ErrClosed
	}
	before := e.raft.LastIndex()
	f := issue()
	err := e.wait(ctx, f)
	switch {
	case err == nil:
		return f.Index(), nil
	case errors.Is(err, raft.ErrRaftShutdown), errors.Is(err, ErrClosed):
		return 0, ErrClosed
	case errors.Is(err, raft.ErrNotLeader):
		// raft refused it before appending it (not leader any more).
		return 0, &ChangeError{Op: op, State: ChangeRefused, Err: e.notLeader()}
	case errors.Is(err, raft.ErrLeadershipLost):
		// Appended, then leadership went: f answered, so its index is set.
		return 0, &ChangeError{Op: op, State: ChangeInFlight, Index: f.Index(), Err: e.notLeader()}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// f is still pending: whether raft appended it is unknown; an
		// index past everything appended so far decides it either way.
		return 0, &ChangeError{Op: op, State: ChangeInFlight, Index: max(e.raft.LastIndex(), before+1), Err: err}
	}
	// raft's own refusals (a configuration changed since prevIndex, a
	// change already in progress) append nothing.
	return 0, &ChangeError{Op: op, State: ChangeRefused, Err: err}
}

// promote makes the member id at addr (a non-voter, or absent) a voter
// safely: it is added as a non-voter first if absent, must catch up, and
// is promoted only if the configuration that makes it a voter has a
// reachable quorum. The caller holds memberMu and has checked the
// arguments against servers, the latest configuration.
func (e *Election) promote(ctx context.Context, servers []raft.Server, id, addr string) (added bool, err error) {
	var prev uint64 // 0: the non-voter existed; memberMu orders our changes
	if _, ok := find(raft.Configuration{Servers: servers}, raft.ServerID(id)); !ok {
		idx, err := e.change(ctx, "add "+id+" as a non-voter", func() raft.IndexFuture {
			return e.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, 0)
		})
		if err != nil {
			return false, err
		}
		e.log.Info("member added as a non-voter, to be promoted once caught up", "id", id, "addr", addr)
		added, prev = true, idx
		servers = append(servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(addr), Suffrage: raft.Nonvoter})
	}
	op := "promote " + id + " to voter"
	if err := e.waitCaughtUp(ctx, id, addr); err != nil {
		if errors.Is(err, ErrClosed) {
			return added, err
		}
		var nl *NotLeaderError
		if errors.As(err, &nl) {
			return added, &ChangeError{Op: op, State: ChangeRefused, Err: err}
		}
		return added, &ChangeError{Op: op, State: ChangeRefused,
			Err: fmt.Errorf("%w (%s stays a non-voter, which costs no quorum: call again once it runs at %s, or remove it)", err, id, addr)}
	}
	term, err := e.leaderTerm()
	if err != nil {
		return added, &ChangeError{Op: op, State: ChangeRefused, Err: err}
	}
	next := withVoter(servers, id, addr)
	if err := checkQuorum(next, e.reachableVoters(ctx, term, next)); err != nil {
		return added, &ChangeError{Op: op, State: ChangeRefused, Err: err}
	}
	_, err = e.change(ctx, op, func() raft.IndexFuture {
		return e.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), prev, 0)
	})
	if err == nil {
		e.log.Info("member promoted to voter", "id", id, "addr", addr)
	}
	return added, err
}

// ReplaceServer replaces the voter oldID (typically a dead one) with a new
// voter m (m.Voter is implied), as one operation that never leaves the
// cluster with more unreachable voters than it tolerates:
//
//  1. m is added as a non-voter (no quorum changes) and must catch up: it
//     answers this leader and its log reaches the leader's commit index.
//     If it does not before ctx ends, the non-voter is removed again and
//     oldID stays: ErrNotCaughtUp, refused.
//  2. oldID is removed, if the voters left include a reachable quorum
//     (else ErrQuorumAtRisk, refused, and the non-voter is removed).
//  3. m is promoted to voter, if the configuration that makes it one has
//     a reachable quorum.
//
// Removing the old voter before promoting the new one keeps the quorum
// small while the new voter is least proven: three voters with one dead
// become two live ones, then three; had the new voter been promoted
// first, the cluster would count four voters with one dead, and a failure
// of the new node before the old one was removed would stop it for good.
//
// A nil error means all of it committed. Otherwise the *ChangeError names
// the step that did not finish and whether it was refused or is in
// flight; ReplaceServer is safe to call again with the same arguments: a
// step already done is skipped (oldID no longer a member, m already a
// non-voter or a voter). A refused replacement removes m again if it is a
// non-voter, whoever added it, and leaves oldID a voter. It runs on the leader only (elsewhere a
// *NotLeaderError), and refuses, changing nothing: invalid IDs, address
// or Meta (as AddMember); oldID equal to m.ID (ErrInvalidArgument);
// oldID not a voter while m is not yet a voter (ErrUnknownServer); m's ID
// or address already used by another member (ErrDuplicateMember); and
// oldID being this leader (ErrInvalidArgument: hand leadership to another
// voter first, TransferTo, and ask the new leader).
func (e *Election) ReplaceServer(ctx context.Context, oldID string, m Member) error {
	if e.closed.Load() {
		return ErrClosed
	}
	if err := epoch.ValidateName(oldID); err != nil {
		return fmt.Errorf("%w: old ID: %v", ErrInvalidArgument, err)
	}
	if err := epoch.ValidateName(m.ID); err != nil {
		return fmt.Errorf("%w: ID: %v", ErrInvalidArgument, err)
	}
	if err := e.checkAddr(m.Addr); err != nil {
		return err
	}
	if len(m.Meta) > MaxMetaLen {
		return fmt.Errorf("%w: Meta of %s is %d bytes, above MaxMetaLen (%d)", ErrInvalidArgument, m.ID, len(m.Meta), MaxMetaLen)
	}
	if oldID == m.ID {
		return fmt.Errorf("%w: the old and the new server are both %s (a server with wiped data rejoins under a new ID)", ErrInvalidArgument, oldID)
	}
	if oldID == e.cfg.ID {
		return fmt.Errorf("%w: %s is this leader: hand leadership to another voter first (TransferTo) and ask the new leader", ErrInvalidArgument, oldID)
	}
	if e.raft.State() != raft.Leader {
		return e.notLeader()
	}
	e.memberMu.Lock()
	defer e.memberMu.Unlock()
	servers, err := e.configuration()
	if err != nil {
		return err
	}
	conf := raft.Configuration{Servers: servers}
	old, oldThere := find(conf, raft.ServerID(oldID))
	cur, newThere := find(conf, raft.ServerID(m.ID))
	for _, s := range servers {
		if string(s.ID) != m.ID && string(s.Address) == m.Addr {
			return fmt.Errorf("%w: address %s already belongs to member %s", ErrDuplicateMember, m.Addr, s.ID)
		}
	}
	switch {
	case newThere && string(cur.Address) != m.Addr:
		return fmt.Errorf("%w: ID %s is already a member at %s; remove it first, or use a new ID", ErrDuplicateMember, m.ID, cur.Address)
	case oldThere && old.Suffrage != raft.Voter:
		return fmt.Errorf("%w: %s is a non-voter: remove it (RemoveServer) and add the new server (AddVoter)", ErrUnknownServer, oldID)
	case !oldThere && !newThere:
		return fmt.Errorf("%w: %s is not a member", ErrUnknownServer, oldID)
	}
	if !oldThere && newThere && cur.Suffrage == raft.Voter {
		return e.recordMeta(ctx, m.ID, m.Meta) // done already
	}

	// 1. The new server as a non-voter, caught up.
	if !newThere {
		if _, err := e.change(ctx, "add "+m.ID+" as a non-voter", func() raft.IndexFuture {
			return e.raft.AddNonvoter(raft.ServerID(m.ID), raft.ServerAddress(m.Addr), 0, 0)
		}); err != nil {
			return err
		}
		servers = append(servers, raft.Server{ID: raft.ServerID(m.ID), Address: raft.ServerAddress(m.Addr), Suffrage: raft.Nonvoter})
		e.log.Info("replacement added as a non-voter", "old", oldID, "id", m.ID, "addr", m.Addr)
	}
	undo := func(cause error) error {
		if newThere && cur.Suffrage == raft.Voter {
			return cause
		}
		// Bounded apart from ctx, which may have ended: the non-voter
		// goes again (whether this call or an earlier, interrupted one
		// added it), so a refused replacement leaves no half-made
		// replacement behind.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.probeWait())
		defer cancel()
		if _, err := e.change(uctx, "remove the non-voter "+m.ID, func() raft.IndexFuture {
			return e.raft.RemoveServer(raft.ServerID(m.ID), 0, 0)
		}); err != nil {
			return errors.Join(cause, err)
		}
		return cause
	}
	if cur.Suffrage != raft.Voter || !newThere {
		if err := e.waitCaughtUp(ctx, m.ID, m.Addr); err != nil {
			if errors.Is(err, ErrClosed) {
				return err
			}
			return undo(&ChangeError{Op: "replace " + oldID + " with " + m.ID, State: ChangeRefused, Err: err})
		}
	}

	// 2. The old voter out, if what is left has a reachable quorum.
	if oldThere {
		err := e.remove(ctx, servers, oldID, string(old.Address), true)
		var ce *ChangeError
		if errors.As(err, &ce) && ce.State == ChangeRefused {
			return undo(err)
		}
		if err != nil {
			return err
		}
		servers = withoutServer(servers, oldID)
	}

	// 3. The new server promoted.
	if _, err := e.promote(ctx, servers, m.ID, m.Addr); err != nil {
		return err
	}
	e.log.Info("server replaced", "old", oldID, "id", m.ID, "addr", m.Addr)
	return e.recordMeta(ctx, m.ID, m.Meta)
}
