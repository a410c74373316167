package election

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/epoch"
)

// ErrRefused is matched by the *RefusedError with which the admission layer
// answers an RPC it does not hand to raft. The sender receives the error's
// text.
var ErrRefused = errors.New("election: rpc refused")

// RefusalReason says why the admission layer refused an RPC. String gives a
// short snake_case name, fit for a metric label.
type RefusalReason uint8

// The reasons, in the order the admission layer checks them.
const (
	// RefusedNoIdentity: the RPC's header names no server ID or no address.
	// raft v1.7.2 skips its own membership check for a vote request without
	// an ID.
	RefusedNoIdentity RefusalReason = iota + 1
	// RefusedClaimsSelf: the header claims this node's own ID. raft never
	// sends an RPC to itself through its transport.
	RefusedClaimsSelf
	// RefusedTermTooHigh: a term in the RPC (its term, or the term of a log
	// entry it names or carries) is above epoch.MaxTerm.
	RefusedTermTooHigh
	// RefusedNotVoter: a RequestVote or RequestPreVote from a server that is
	// not a voter of this node's latest configuration at the address it
	// claims, or, while this node has no configuration yet, from another
	// server than the one that appended to it last.
	RefusedNotVoter
	// RefusedNotMember: an AppendEntries or InstallSnapshot from a server
	// that is not in this node's latest configuration at the address it
	// claims (a node with no configuration yet accepts any sender, as raft
	// does when it joins).
	RefusedNotMember
	// RefusedNotLeader: a TimeoutNow from a server other than the leader this
	// node currently follows, or to a node that is not a voter.
	RefusedNotLeader
	// RefusedUnknownCommand: an RPC raft does not know.
	RefusedUnknownCommand

	numRefusalReasons = iota
)

// RefusalReasons returns every reason, in order.
func RefusalReasons() []RefusalReason {
	rs := make([]RefusalReason, 0, numRefusalReasons)
	for r := RefusalReason(1); r <= numRefusalReasons; r++ {
		rs = append(rs, r)
	}
	return rs
}

func (r RefusalReason) String() string {
	switch r {
	case RefusedNoIdentity:
		return "no_identity"
	case RefusedClaimsSelf:
		return "claims_self"
	case RefusedTermTooHigh:
		return "term_too_high"
	case RefusedNotVoter:
		return "not_voter"
	case RefusedNotMember:
		return "not_member"
	case RefusedNotLeader:
		return "not_leader"
	case RefusedUnknownCommand:
		return "unknown_command"
	}
	return fmt.Sprintf("reason_%d", uint8(r))
}

// RefusedError is the admission layer's answer to an RPC it refused. It
// matches ErrRefused.
type RefusedError struct {
	Reason  RefusalReason
	Command string // "RequestVote", "AppendEntries", ...
	ID      string // the server ID the RPC claimed
	Addr    string // the address the RPC claimed
	Term    uint64 // the RPC's term (0 for TimeoutNow)
}

// Error implements error.
func (e *RefusedError) Error() string {
	return fmt.Sprintf("election: rpc refused: %s from %q at %q (term %d): %s", e.Command, e.ID, e.Addr, e.Term, e.Reason)
}

// Is reports whether target is ErrRefused.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// AdmissionStats counts what the admission layer did since New.
type AdmissionStats struct {
	// Admitted is the number of RPCs handed to raft.
	Admitted uint64
	// Refused counts refused RPCs by reason; every reason is present, with
	// zero for none.
	Refused map[RefusalReason]uint64
}

// Admission returns the admission layer's counts so far. It is cheap
// (atomic loads) and safe to call at any time, also after Close.
func (e *Election) Admission() AdmissionStats {
	return e.admit.stats()
}

// admission is the gate between the transport and raft: every RPC the
// transport receives passes check before raft sees it.
//
// Why: hashicorp/raft v1.7.2 adopts the term of any RPC it is handed. It
// skips its membership check for a RequestVote whose ID is empty, skips
// "I already have a leader" when the request carries the leadership
// transfer flag, accepts AppendEntries and InstallSnapshot from anyone, and
// turns any TimeoutNow into a candidacy. One message from a process that is
// not a member could so raise every node's term to 2^63 (past what a fence
// can store) or 2^64-1 (the next election wraps to 0 and nothing is ever
// elected again). The rules here:
//
//   - every RPC must name a server ID and an address, not this node's ID,
//     and carry no term above epoch.MaxTerm;
//   - RequestVote and RequestPreVote only from a voter of the latest
//     configuration, at the address the configuration has for it; a node
//     without a configuration votes only for the server that appended to
//     it last (the leader it is joining: once that leader has added it as
//     a voter, it may need this node's vote to win again before the new
//     configuration reaches it, as raft allows), and for nobody before any
//     append;
//   - AppendEntries and InstallSnapshot only from a member (any suffrage:
//     a leader that is being demoted keeps leading until the change
//     commits) at its configured address; a node without a configuration
//     (joining, before its first entries) accepts any sender, as raft does;
//   - TimeoutNow only from the leader this node follows right now, and
//     only to a voter.
//
// The configuration is raft's latest (GetConfiguration reads it without
// the main loop); it may change between this check and raft's own, which
// is as it would be had the RPC arrived a moment earlier.
//
// The ID and address are claims: over plain TCP anyone can make them.
// Mutual TLS from package transport binds them to the peer's certificate.
type admission struct {
	raft *raft.Raft
	log  *slog.Logger
	self raft.ServerID

	// joining is the ID and address of the last server whose
	// AppendEntries or InstallSnapshot was admitted while this node had no
	// configuration (nil: none).
	joining atomic.Pointer[[2]string]

	admitted atomic.Uint64
	refused  [numRefusalReasons + 1]atomic.Uint64
	warned   [numRefusalReasons + 1]atomic.Int64 // unix nanos of the last warning per reason
}

// warnEvery is how often each refusal reason is logged at Warn level; the
// others go to Debug, so a flood of forged RPCs cannot flood the log.
const warnEvery = time.Second

func (a *admission) stats() AdmissionStats {
	s := AdmissionStats{Admitted: a.admitted.Load(), Refused: make(map[RefusalReason]uint64, numRefusalReasons)}
	for _, r := range RefusalReasons() {
		s.Refused[r] = a.refused[r].Load()
	}
	return s
}

// admit hands rpc to raft (returns true) or answers it with a
// *RefusedError, counts and logs it (returns false).
func (a *admission) admit(rpc raft.RPC) bool {
	err := a.check(rpc)
	if err == nil {
		a.admitted.Add(1)
		return true
	}
	a.refused[err.Reason].Add(1)
	now := time.Now().UnixNano()
	last := a.warned[err.Reason].Load()
	args := []any{"command", err.Command, "claimed-id", err.ID, "claimed-addr", err.Addr, "term", err.Term, "reason", err.Reason.String()}
	if now-last >= int64(warnEvery) && a.warned[err.Reason].CompareAndSwap(last, now) {
		a.log.Warn("refused an rpc", append(args, "refused-so-far", a.refused[err.Reason].Load())...)
	} else {
		a.log.Debug("refused an rpc", args...)
	}
	// An InstallSnapshot's data is not read: package transport closes a
	// connection whose snapshot stream was left unread.
	rpc.Respond(nil, err)
	return false
}

// check applies the rules; nil admits rpc.
func (a *admission) check(rpc raft.RPC) *RefusedError {
	h, ok := rpc.Command.(raft.WithRPCHeader)
	if !ok {
		return &RefusedError{Reason: RefusedUnknownCommand, Command: fmt.Sprintf("%T", rpc.Command)}
	}
	hdr := h.GetRPCHeader()
	e := &RefusedError{ID: string(hdr.ID), Addr: string(hdr.Addr)}
	var terms []uint64
	switch c := rpc.Command.(type) {
	case *raft.AppendEntriesRequest:
		e.Command, e.Term = "AppendEntries", c.Term
		terms = append(terms, c.Term, c.PrevLogTerm)
		for _, l := range c.Entries {
			if l != nil {
				terms = append(terms, l.Term)
			}
		}
	case *raft.RequestVoteRequest:
		e.Command, e.Term = "RequestVote", c.Term
		terms = append(terms, c.Term, c.LastLogTerm)
	case *raft.RequestPreVoteRequest:
		e.Command, e.Term = "RequestPreVote", c.Term
		terms = append(terms, c.Term, c.LastLogTerm)
	case *raft.InstallSnapshotRequest:
		e.Command, e.Term = "InstallSnapshot", c.Term
		terms = append(terms, c.Term, c.LastLogTerm)
	case *raft.TimeoutNowRequest:
		e.Command = "TimeoutNow"
	default:
		e.Command, e.Reason = fmt.Sprintf("%T", rpc.Command), RefusedUnknownCommand
		return e
	}
	switch {
	case len(hdr.ID) == 0 || len(hdr.Addr) == 0:
		e.Reason = RefusedNoIdentity
		return e
	case raft.ServerID(hdr.ID) == a.self:
		e.Reason = RefusedClaimsSelf
		return e
	}
	for _, t := range terms {
		if t > epoch.MaxTerm {
			e.Reason = RefusedTermTooHigh
			return e
		}
	}
	id, addr := raft.ServerID(hdr.ID), raft.ServerAddress(hdr.Addr)
	conf := a.configuration()
	switch rpc.Command.(type) {
	case *raft.RequestVoteRequest, *raft.RequestPreVoteRequest:
		if len(conf.Servers) == 0 {
			if j := a.joining.Load(); j != nil && j[0] == string(id) && j[1] == string(addr) {
				return nil // joining: the leader that appended to us, standing again
			}
			e.Reason = RefusedNotVoter
			return e
		}
		if s, ok := find(conf, id); !ok || s.Suffrage != raft.Voter || s.Address != addr {
			e.Reason = RefusedNotVoter
			return e
		}
	case *raft.AppendEntriesRequest, *raft.InstallSnapshotRequest:
		if len(conf.Servers) == 0 {
			// joining: the first leader that appends brings the configuration
			a.joining.Store(&[2]string{string(id), string(addr)})
			return nil
		}
		if s, ok := find(conf, id); !ok || s.Address != addr {
			e.Reason = RefusedNotMember
			return e
		}
	case *raft.TimeoutNowRequest:
		leaderAddr, leaderID := a.raft.LeaderWithID()
		me, ok := find(conf, a.self)
		if leaderID == "" || leaderID != id || leaderAddr != addr || !ok || me.Suffrage != raft.Voter {
			e.Reason = RefusedNotLeader
			return e
		}
	}
	return nil
}

// configuration is raft's latest configuration (empty if it cannot be read).
func (a *admission) configuration() raft.Configuration {
	f := a.raft.GetConfiguration()
	if f.Error() != nil {
		return raft.Configuration{}
	}
	return f.Configuration()
}

func find(conf raft.Configuration, id raft.ServerID) (raft.Server, bool) {
	for _, s := range conf.Servers {
		if s.ID == id {
			return s, true
		}
	}
	return raft.Server{}, false
}
