package election

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/epoch"
)

// Member is one server of the cluster's latest Raft configuration.
type Member struct {
	ID   string
	Addr string // its Raft transport address
	// Voter reports whether it votes and may lead. A non-voter (AddNonvoter)
	// replicates the log and observes the leadership but never stands for
	// election and never counts towards a quorum.
	Voter bool
	// Meta is the metadata this member advertises (Config.Meta, or the
	// Meta given to AddMember), typically its application URL; empty when
	// none is known yet.
	Meta string
}

// AddVoter adds a voting member with this Raft ID and transport address,
// waiting until the configuration change is committed. It is
// AddMember(ctx, Member{ID: id, Addr: addr, Voter: true}); see AddMember for
// what it refuses.
func (e *Election) AddVoter(ctx context.Context, id, addr string) error {
	return e.AddMember(ctx, Member{ID: id, Addr: addr, Voter: true})
}

// AddNonvoter adds a member that replicates the log and follows the
// leadership (Observe, Leader and WaitLeader work on it) but never votes,
// never counts towards a quorum and never leads: a read replica, or a node
// kept out of the leadership on purpose. It is AddMember(ctx, Member{ID: id,
// Addr: addr}). A non-voter adds no fault tolerance: see "Smallest safe
// deployments" in the package documentation.
func (e *Election) AddNonvoter(ctx context.Context, id, addr string) error {
	return e.AddMember(ctx, Member{ID: id, Addr: addr})
}

// AddMember adds m to the cluster — a voter if m.Voter, else a non-voter —
// and waits until the configuration change is committed; a non-empty m.Meta
// is then recorded as its metadata (see Config.Meta). It runs on the leader
// only: elsewhere it returns a *NotLeaderError naming the leader, so the
// caller can forward the request.
//
// Every input is checked before raft sees it, and a refused change leaves
// the configuration as it was:
//   - ErrInvalidArgument: m.ID is not a valid name (epoch.ValidateName), or
//     m.Meta is longer than MaxMetaLen;
//   - ErrInvalidAddress (which also matches ErrInvalidArgument): m.Addr is
//     empty or, when this node's own transport address is host:port (TCP,
//     TLS), is not host:port with a port in 1..65535;
//   - ErrDuplicateMember: m.ID is already a member at another address, m.Addr
//     already belongs to another member, or m asks for a non-voter where a
//     voter of that ID and address exists (a demotion is not an addition).
//
// Adding a member that already exists with the same ID, address and
// suffrage changes nothing and returns nil (a restarted node joining again);
// adding as a voter an existing non-voter of the same ID and address
// promotes it. The check and the change are one step with respect to every
// other membership change made through this Election (not to changes made
// directly on Raft()).
func (e *Election) AddMember(ctx context.Context, m Member) error {
	if e.closed.Load() {
		return ErrClosed
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
	if e.raft.State() != raft.Leader {
		return e.notLeader()
	}
	e.memberMu.Lock()
	defer e.memberMu.Unlock()
	servers, err := e.configuration()
	if err != nil {
		return err
	}
	for _, s := range servers {
		id, addr, voter := string(s.ID), string(s.Address), s.Suffrage == raft.Voter
		switch {
		case id == m.ID && addr != m.Addr:
			return fmt.Errorf("%w: ID %s is already a member at %s; remove it first, or add the new node under a new ID",
				ErrDuplicateMember, id, addr)
		case id != m.ID && addr == m.Addr:
			return fmt.Errorf("%w: address %s already belongs to member %s", ErrDuplicateMember, addr, id)
		case id == m.ID && voter && !m.Voter:
			return fmt.Errorf("%w: %s is already a voter at %s (a non-voter cannot replace it)", ErrDuplicateMember, id, addr)
		case id == m.ID && voter == m.Voter:
			return e.recordMeta(ctx, m.ID, m.Meta) // already a member: nothing to change
		}
	}
	if m.Voter {
		// Learner first: see reconfig.go.
		if _, err := e.promote(ctx, servers, m.ID, m.Addr); err != nil {
			return err
		}
		e.log.Info("member added", "id", m.ID, "addr", m.Addr, "voter", true)
		return e.recordMeta(ctx, m.ID, m.Meta)
	}
	err = e.await(ctx, func() raft.Future {
		return e.raft.AddNonvoter(raft.ServerID(m.ID), raft.ServerAddress(m.Addr), 0, 0)
	})
	if err := e.configErr("add member "+m.ID, err); err != nil {
		return err
	}
	e.log.Info("member added", "id", m.ID, "addr", m.Addr, "voter", m.Voter)
	return e.recordMeta(ctx, m.ID, m.Meta)
}

// RemoveServer removes the member with this Raft ID, waiting until the
// configuration change is committed. Removing the leader itself makes it
// step down once the change commits. On a node that is not leader it returns
// a *NotLeaderError naming the leader. It refuses, leaving the configuration
// unchanged, an ID that is not a valid name (ErrInvalidArgument) or not a
// member (ErrUnknownServer), and the last voter (ErrLastVoter: a cluster
// without a voter can never elect again). The check and the change are one
// step, as in AddMember.
func (e *Election) RemoveServer(ctx context.Context, id string) error {
	if e.closed.Load() {
		return ErrClosed
	}
	if err := epoch.ValidateName(id); err != nil {
		return fmt.Errorf("%w: ID: %v", ErrInvalidArgument, err)
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
	found, isVoter, voters, addr := false, false, 0, ""
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			voters++
		}
		if string(s.ID) == id {
			found, isVoter, addr = true, s.Suffrage == raft.Voter, string(s.Address)
		}
	}
	if !found {
		return fmt.Errorf("%w: %s is not a member", ErrUnknownServer, id)
	}
	if isVoter && voters == 1 {
		return fmt.Errorf("%w: %s is the only voter", ErrLastVoter, id)
	}
	return e.remove(ctx, servers, id, addr, isVoter)
}

// remove removes the member id at addr from servers (the latest
// configuration), refusing to remove a voter when the voters left would
// not include a reachable quorum (reconfig.go), and tells a removed
// server of its removal once the change commits. The caller holds
// memberMu.
func (e *Election) remove(ctx context.Context, servers []raft.Server, id, addr string, isVoter bool) error {
	op := "remove " + id
	if isVoter {
		term, err := e.leaderTerm()
		if err != nil {
			return err
		}
		next := withoutServer(servers, id)
		if err := checkQuorum(next, e.reachableVoters(ctx, term, next)); err != nil {
			return &ChangeError{Op: op, State: ChangeRefused, Err: err}
		}
	}
	index, err := e.change(ctx, op, func() raft.IndexFuture {
		return e.raft.RemoveServer(raft.ServerID(id), 0, 0)
	})
	if err != nil {
		return err
	}
	e.log.Info("member removed", "id", id)
	if id != e.cfg.ID {
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.tellRemoved(id, addr, index)
		}()
	}
	return nil
}

// Members returns the servers of the latest Raft configuration this node
// knows (on the leader it may include a change not yet committed), with the
// metadata each advertises.
func (e *Election) Members() ([]Member, error) {
	if e.closed.Load() {
		return nil, ErrClosed
	}
	servers, err := e.configuration()
	if err != nil {
		return nil, err
	}
	out := make([]Member, 0, len(servers))
	for _, s := range servers {
		out = append(out, Member{
			ID: string(s.ID), Addr: string(s.Address), Voter: s.Suffrage == raft.Voter,
			Meta: e.meta.get(string(s.ID)),
		})
	}
	return out, nil
}

// configuration returns the latest configuration's servers.
func (e *Election) configuration() ([]raft.Server, error) {
	f := e.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		if e.closed.Load() {
			return nil, ErrClosed
		}
		return nil, fmt.Errorf("election: reading the configuration: %w", err)
	}
	return f.Configuration().Servers, nil
}

// checkAddr refuses a member address that this node's transport could not
// dial: empty, or — when this node's own address is host:port, as every
// network transport's is — anything but host:port with a host and a port
// in 1..65535. In-memory transports name nodes freely.
func (e *Election) checkAddr(addr string) error {
	bad := func(format string, args ...any) error {
		return &addrError{msg: fmt.Sprintf(format, args...)}
	}
	if addr == "" {
		return bad("empty address")
	}
	if _, _, err := net.SplitHostPort(e.localAddr); err != nil {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return bad("%q is not host:port", addr)
	}
	if host == "" || strings.ContainsAny(host, " /\\@?#") {
		return bad("%q has no usable host", addr)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return bad("%q: port must be 1..65535", addr)
	}
	return nil
}

// addrError is checkAddr's refusal: it reads "election: invalid member
// address: …" (one prefix, not the two of both sentinels) and matches
// ErrInvalidAddress and ErrInvalidArgument.
type addrError struct{ msg string }

func (e *addrError) Error() string   { return ErrInvalidAddress.Error() + ": " + e.msg }
func (e *addrError) Unwrap() []error { return []error{ErrInvalidArgument, ErrInvalidAddress} }
