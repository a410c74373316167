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
	// entry it names or carries) is outside the term window: more than
	// TermWindow above this node's current term, above JumpLimit unless it
	// is at most one above the current term, or above epoch.MaxTerm (see
	// TermWindow).
	RefusedTermTooHigh
	// RefusedNotVoter: a RequestVote or RequestPreVote from a server that is
	// not a voter of this node's latest configuration at the address it
	// claims, or, while this node has no configuration yet, from another
	// server than the one that appended to it last; or an AppendEntries or
	// InstallSnapshot from a member of the configuration that is not a
	// voter (only voters lead).
	RefusedNotVoter
	// RefusedNotMember: an AppendEntries or InstallSnapshot from a server
	// that is not in this node's latest configuration at the address it
	// claims (a node with no configuration yet accepts any sender, as raft
	// does when it joins).
	RefusedNotMember
	// RefusedNotLeader: a TimeoutNow from a server other than the leader this
	// node currently follows, or to a node that is not a voter; or an
	// AppendEntries or InstallSnapshot at this node's current term from
	// another voter than the leader it follows in that term (a term has one
	// leader).
	RefusedNotLeader
	// RefusedUnknownCommand: an RPC raft does not know.
	RefusedUnknownCommand
	// RefusedMalformed: the RPC's content is not what a correct raft peer
	// sends (docs/DESIGN.md, "What a valid RPC is"): a nil entry, an entry
	// type raft v1.7.2 cannot take from a peer, entries whose indexes do
	// not follow PrevLogEntry one by one or whose terms go down or pass the
	// RPC's term, more than MaxEntries entries, a configuration (in a
	// LogConfiguration entry or a snapshot) that does not decode or is not
	// a valid configuration, an unsupported snapshot version, a negative
	// snapshot size, or a header ID or address that is too long.
	RefusedMalformed
	// RefusedIndexTooHigh: a log index in the RPC is above MaxIndex, or a
	// snapshot's above IndexJumpLimit (see MaxIndex).
	RefusedIndexTooHigh

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
	case RefusedMalformed:
		return "malformed"
	case RefusedIndexTooHigh:
		return "index_too_high"
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
	Detail  string // what was wrong, for RefusedMalformed and RefusedTermTooHigh
}

// Error implements error.
func (e *RefusedError) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("election: rpc refused: %s from %q at %q (term %d): %s: %s", e.Command, e.ID, e.Addr, e.Term, e.Reason, e.Detail)
	}
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

// The term window. hashicorp/raft adopts any higher term an RPC (or a
// response to one of its own) carries. A ceiling alone (refuse terms above
// epoch.MaxTerm) makes the ceiling the place a cluster dies: one RPC at
// MaxTerm moves every node there, and the next election's term is refused
// everywhere. So a term is admitted only inside a window:
//
//   - T <= current+1, up to epoch.MaxTerm: the next election's term, always;
//   - current+1 < T <= current+TermWindow, up to JumpLimit: a jump, as a
//     node that was away while the others elected gets from the leader;
//   - nothing else.
//
// A jump therefore never passes JumpLimit, which leaves epoch.MaxTerm -
// JumpLimit = 2^40 elections of headroom: past JumpLimit a term moves one
// election at a time, each one a durable (fsynced) term write on every node
// it reaches; at one every millisecond, 2^40 of them take 35 years. No RPC
// sequence from any single peer can so bring a cluster to a term at which
// it can no longer elect, in any time that matters.
//
// A node without configuration (joining) has no term worth protecting: it
// takes a term up to JumpLimit from the first server that appends to it.
const (
	// TermWindow is how far above its current term a single RPC may move
	// a node's term: 2^32, more elections than an honest cluster holds in
	// decades of continual elections, so a node that was away comes back
	// with the leader's first append.
	TermWindow uint64 = 1 << 32
	// JumpLimit is the highest term a jump (a move of more than one term)
	// may reach: epoch.MaxTerm - 2^40.
	JumpLimit = epoch.MaxTerm - 1<<40
	// MaxEntries is the most log entries one AppendEntries may carry:
	// hashicorp/raft's own upper bound on Config.MaxAppendEntries.
	MaxEntries = 1024
	// MaxServers is the most servers a configuration may list.
	MaxServers = 256
	// maxAddrLen bounds a server address (in an RPC header or a
	// configuration).
	maxAddrLen = 255
)

// termAdmissible reports whether t may move a node from term cur: see
// TermWindow.
func termAdmissible(t, cur uint64, joining bool) bool {
	switch {
	case t <= cur:
		return true
	case t > epoch.MaxTerm:
		return false
	case t == cur+1:
		return true
	case joining:
		return t <= JumpLimit
	}
	return t <= JumpLimit && t-cur <= TermWindow
}

// windowTop is the highest term termAdmissible lets move a node from term
// cur (false at epoch.MaxTerm, where no higher term is admitted).
func windowTop(cur uint64) (uint64, bool) {
	switch {
	case cur >= epoch.MaxTerm:
		return 0, false
	case cur >= JumpLimit:
		return cur + 1, true
	}
	return max(cur+1, min(cur+TermWindow, JumpLimit)), true
}

// admission is the gate between the transport and raft: every RPC the
// transport receives passes check before raft sees it, and check admits
// only RPCs that match the definition of a valid RPC in docs/DESIGN.md
// ("What a valid Raft RPC is"); everything else is refused, counted by
// reason and logged at a bounded rate.
//
// Why: hashicorp/raft v1.7.2 adopts the term of any RPC it is handed,
// skips its membership check for a RequestVote whose ID is empty, skips
// "I already have a leader" when the request carries the leadership
// transfer flag, accepts AppendEntries and InstallSnapshot from anyone,
// turns any TimeoutNow into a candidacy, dereferences nil entries and
// panics on a configuration that does not decode. The rules:
//
//   - every RPC names a server ID and an address (not this node's ID, each
//     at most 255 bytes), and every term in it is inside the term window
//     (termAdmissible);
//   - RequestVote and RequestPreVote only from a voter of the latest
//     configuration, at the address the configuration has for it; a node
//     without a configuration votes only for the server that appended to
//     it last (the leader it is joining: once that leader has added it as
//     a voter, it may need this node's vote to win again before the new
//     configuration reaches it, as raft allows), and for nobody before any
//     append; LastLogTerm at most Term;
//   - AppendEntries and InstallSnapshot only from a voter at its configured
//     address (only voters lead), and at this node's current term only
//     from the leader it follows in that term; a node without a
//     configuration (joining) accepts any sender, as raft does, within the
//     same content rules;
//   - AppendEntries content: at most MaxEntries entries, none nil, each of
//     a type a leader replicates (command, no-op, barrier, configuration),
//     indexes PrevLogEntry+1, +2, ..., terms from PrevLogTerm up, never
//     above Term; a configuration entry decodes to a valid configuration
//     (validConfiguration);
//   - InstallSnapshot content: snapshot version 1 (what raft v1.7.2 sends),
//     a size >= 0, LastLogTerm at most Term, and a Configuration that
//     decodes to a valid configuration;
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
	now  func() time.Time // nil: time.Now (tests set a clock)

	// joining is the ID and address of the last server whose
	// AppendEntries or InstallSnapshot was admitted while this node had no
	// configuration (nil: none).
	joining atomic.Pointer[[2]string]

	admitted atomic.Uint64
	refused  [numRefusalReasons + 1]atomic.Uint64
	warned   [numRefusalReasons + 1]atomic.Int64 // unix nanos of the last warning per reason
}

// warnEvery is how often each refusal reason is logged at Warn level: the
// first refusal of a reason is, then one a minute at most, carrying the
// count so far (as raft's own peer warnings are summarised once a minute).
// The others go to Debug, so neither a flood of forged RPCs nor a steady
// trickle of expected refusals (a node waiting to be added refuses the
// members' pre-votes until its configuration arrives) fills the log.
const warnEvery = time.Minute

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
	a.refuse(err)
	// An InstallSnapshot's data is not read: package transport closes a
	// connection whose snapshot stream was left unread.
	rpc.Respond(nil, err)
	return false
}

// refuse counts and logs err.
func (a *admission) refuse(err *RefusedError) {
	a.refused[err.Reason].Add(1)
	clock := a.now
	if clock == nil {
		clock = time.Now
	}
	now := clock().UnixNano()
	last := a.warned[err.Reason].Load()
	args := []any{"command", err.Command, "claimed-id", err.ID, "claimed-addr", err.Addr, "term", err.Term, "reason", err.Reason.String()}
	if err.Detail != "" {
		args = append(args, "detail", err.Detail)
	}
	if now-last >= int64(warnEvery) && a.warned[err.Reason].CompareAndSwap(last, now) {
		a.log.Warn("refused an rpc", append(args, "refused-so-far", a.refused[err.Reason].Load())...)
	} else {
		a.log.Debug("refused an rpc", args...)
	}
}

// check applies the rules; nil admits rpc.
func (a *admission) check(rpc raft.RPC) *RefusedError {
	h, ok := rpc.Command.(raft.WithRPCHeader)
	if !ok || h == nil {
		return &RefusedError{Reason: RefusedUnknownCommand, Command: fmt.Sprintf("%T", rpc.Command)}
	}
	var terms []uint64
	var hdr raft.RPCHeader
	e := &RefusedError{}
	switch c := rpc.Command.(type) {
	case *raft.AppendEntriesRequest:
		if c == nil {
			return &RefusedError{Reason: RefusedMalformed, Command: "AppendEntries", Detail: "nil request"}
		}
		hdr, e.Command, e.Term = c.RPCHeader, "AppendEntries", c.Term
		terms = append(terms, c.Term, c.PrevLogTerm)
		for _, l := range c.Entries {
			if l != nil {
				terms = append(terms, l.Term)
			}
		}
	case *raft.RequestVoteRequest:
		if c == nil {
			return &RefusedError{Reason: RefusedMalformed, Command: "RequestVote", Detail: "nil request"}
		}
		hdr, e.Command, e.Term = c.RPCHeader, "RequestVote", c.Term
		terms = append(terms, c.Term, c.LastLogTerm)
	case *raft.RequestPreVoteRequest:
		if c == nil {
			return &RefusedError{Reason: RefusedMalformed, Command: "RequestPreVote", Detail: "nil request"}
		}
		// A pre-vote never moves raft's term; its Term is the one the
		// candidate would stand in.
		hdr, e.Command, e.Term = c.RPCHeader, "RequestPreVote", c.Term
		terms = append(terms, c.Term, c.LastLogTerm)
	case *raft.InstallSnapshotRequest:
		if c == nil {
			return &RefusedError{Reason: RefusedMalformed, Command: "InstallSnapshot", Detail: "nil request"}
		}
		hdr, e.Command, e.Term = c.RPCHeader, "InstallSnapshot", c.Term
		terms = append(terms, c.Term, c.LastLogTerm)
	case *raft.TimeoutNowRequest:
		if c == nil {
			return &RefusedError{Reason: RefusedMalformed, Command: "TimeoutNow", Detail: "nil request"}
		}
		hdr, e.Command = c.RPCHeader, "TimeoutNow"
	default:
		e.Command, e.Reason = fmt.Sprintf("%T", rpc.Command), RefusedUnknownCommand
		return e
	}
	e.ID, e.Addr = string(hdr.ID), string(hdr.Addr)
	switch {
	case len(hdr.ID) == 0 || len(hdr.Addr) == 0:
		e.Reason = RefusedNoIdentity
		return e
	case raft.ServerID(hdr.ID) == a.self:
		e.Reason = RefusedClaimsSelf
		return e
	case len(hdr.ID) > maxAddrLen || len(hdr.Addr) > maxAddrLen:
		return e.malformed("header ID or address longer than %d bytes", maxAddrLen)
	}
	conf := a.configuration()
	joining := len(conf.Servers) == 0
	cur := a.raft.CurrentTerm()
	for _, t := range terms {
		if !termAdmissible(t, cur, joining) {
			e.Reason = RefusedTermTooHigh
			e.Detail = fmt.Sprintf("term %d from current term %d", t, cur)
			return e
		}
	}
	if err := indexes(rpc, e); err != nil {
		return err
	}
	id, addr := raft.ServerID(hdr.ID), raft.ServerAddress(hdr.Addr)
	if err := a.sender(rpc, e, conf, id, addr, cur); err != nil {
		return err
	}
	if err := a.content(rpc, e); err != nil {
		return err
	}
	switch rpc.Command.(type) {
	case *raft.AppendEntriesRequest, *raft.InstallSnapshotRequest:
		if joining {
			// joining: the first leader that appends brings the configuration
			a.joining.Store(&[2]string{string(id), string(addr)})
		}
	}
	return nil
}

// sender applies the rules on who may send rpc.
func (a *admission) sender(rpc raft.RPC, e *RefusedError, conf raft.Configuration, id raft.ServerID, addr raft.ServerAddress, cur uint64) *RefusedError {
	joining := len(conf.Servers) == 0
	switch c := rpc.Command.(type) {
	case *raft.RequestVoteRequest, *raft.RequestPreVoteRequest:
		if joining {
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
	case *raft.AppendEntriesRequest:
		return a.leaderGrade(e, conf, id, addr, c.Term, cur)
	case *raft.InstallSnapshotRequest:
		return a.leaderGrade(e, conf, id, addr, c.Term, cur)
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

// leaderGrade applies the sender rules of AppendEntries and
// InstallSnapshot: only a voter leads, and a term has one leader.
func (a *admission) leaderGrade(e *RefusedError, conf raft.Configuration, id raft.ServerID, addr raft.ServerAddress, term, cur uint64) *RefusedError {
	if len(conf.Servers) == 0 {
		return nil // joining: any sender (check stores it once the content passes)
	}
	s, ok := find(conf, id)
	if (!ok || s.Address != addr || s.Suffrage != raft.Voter) && term == cur {
		// The leader this node already follows in this term keeps
		// appending though the configuration here does not (yet) make it
		// a voter: a node that joined took a snapshot from it whose
		// configuration predates the leader's own promotion, and the
		// entries that promote it are among those still to come. Raft
		// elects one leader per term, and this node accepted this one
		// under the rules above before its configuration changed.
		if la, lid := a.raft.LeaderWithID(); lid == id && la == addr {
			return nil
		}
	}
	switch {
	case !ok || s.Address != addr:
		e.Reason = RefusedNotMember
		return e
	case s.Suffrage != raft.Voter:
		e.Reason = RefusedNotVoter
		return e
	}
	if term == cur {
		// Raft elects one leader per term: at this node's own term only the
		// leader it follows (or, before it follows one, any voter: the
		// winner of the election under way) appends.
		if _, leaderID := a.raft.LeaderWithID(); leaderID != "" && leaderID != id {
			e.Reason = RefusedNotLeader
			return e
		}
		if a.raft.State() == raft.Leader {
			e.Reason = RefusedNotLeader
			return e
		}
	}
	return nil
}

// content checks what an RPC carries, whoever sent it.
func (a *admission) content(rpc raft.RPC, e *RefusedError) *RefusedError {
	switch c := rpc.Command.(type) {
	case *raft.AppendEntriesRequest:
		if c.PrevLogTerm > c.Term {
			return e.malformed("PrevLogTerm %d above Term %d", c.PrevLogTerm, c.Term)
		}
		if len(c.Entries) > MaxEntries {
			return e.malformed("%d entries, more than %d", len(c.Entries), MaxEntries)
		}
		prevTerm := c.PrevLogTerm
		for i, l := range c.Entries {
			if l == nil {
				return e.malformed("entry %d is nil", i)
			}
			if want := c.PrevLogEntry + 1 + uint64(i); l.Index != want || want == 0 {
				return e.malformed("entry %d has index %d, want %d", i, l.Index, want)
			}
			if l.Term < prevTerm || l.Term > c.Term || l.Term == 0 {
				return e.malformed("entry %d has term %d (previous %d, rpc %d)", i, l.Term, prevTerm, c.Term)
			}
			prevTerm = l.Term
			switch l.Type {
			case raft.LogCommand, raft.LogNoop, raft.LogBarrier:
			case raft.LogConfiguration:
				if err := validConfiguration(l.Data); err != nil {
					return e.malformed("entry %d: %v", i, err)
				}
			default:
				return e.malformed("entry %d has type %d", i, l.Type)
			}
		}
	case *raft.RequestVoteRequest:
		if c.LastLogTerm > c.Term {
			return e.malformed("LastLogTerm %d above Term %d", c.LastLogTerm, c.Term)
		}
	case *raft.RequestPreVoteRequest:
		if c.LastLogTerm > c.Term {
			return e.malformed("LastLogTerm %d above Term %d", c.LastLogTerm, c.Term)
		}
	case *raft.InstallSnapshotRequest:
		switch {
		case c.SnapshotVersion != 1:
			return e.malformed("snapshot version %d", c.SnapshotVersion)
		case c.Size < 0:
			return e.malformed("snapshot size %d", c.Size)
		case c.LastLogTerm > c.Term || c.LastLogTerm == 0 || c.LastLogIndex == 0:
			return e.malformed("snapshot of index %d term %d in rpc term %d", c.LastLogIndex, c.LastLogTerm, c.Term)
		case c.ConfigurationIndex > c.LastLogIndex:
			return e.malformed("configuration index %d above the snapshot's %d", c.ConfigurationIndex, c.LastLogIndex)
		}
		if err := validConfiguration(c.Configuration); err != nil {
			return e.malformed("snapshot: %v", err)
		}
	}
	return nil
}

func (e *RefusedError) malformed(format string, args ...any) *RefusedError {
	e.Reason, e.Detail = RefusedMalformed, fmt.Sprintf(format, args...)
	return e
}

// validConfiguration decodes a configuration as raft does (raft's
// DecodeConfiguration panics on bad input: the panic is caught here) and
// checks it: 1..MaxServers servers, each a known suffrage, a valid ID
// (epoch.ValidateName, as every termfence server ID), an address of 1..255
// bytes, no ID or address twice, at least one voter.
func validConfiguration(b []byte) (err error) {
	if len(b) == 0 {
		return errors.New("empty configuration")
	}
	var conf raft.Configuration
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("configuration does not decode: %v", r)
			}
		}()
		conf = raft.DecodeConfiguration(b)
	}()
	if err != nil {
		return err
	}
	if n := len(conf.Servers); n == 0 || n > MaxServers {
		return fmt.Errorf("configuration of %d servers", n)
	}
	ids := make(map[raft.ServerID]bool, len(conf.Servers))
	addrs := make(map[raft.ServerAddress]bool, len(conf.Servers))
	voters := 0
	for i, s := range conf.Servers {
		switch s.Suffrage {
		case raft.Voter:
			voters++
		case raft.Nonvoter, raft.Staging:
		default:
			return fmt.Errorf("server %d has suffrage %d", i, s.Suffrage)
		}
		if err := epoch.ValidateName(string(s.ID)); err != nil {
			return fmt.Errorf("server %d: ID: %v", i, err)
		}
		if len(s.Address) == 0 || len(s.Address) > maxAddrLen {
			return fmt.Errorf("server %d (%s): address of %d bytes", i, s.ID, len(s.Address))
		}
		if ids[s.ID] || addrs[s.Address] {
			return fmt.Errorf("server %d (%s at %s) listed twice", i, s.ID, s.Address)
		}
		ids[s.ID], addrs[s.Address] = true, true
	}
	if voters == 0 {
		return errors.New("configuration without a voter")
	}
	return nil
}

// isRenewal reports whether rpc is shaped as a role renewal: a
// RequestPreVote with term 0 (docs/DESIGN.md, "Roles").
func isRenewal(rpc raft.RPC) bool {
	req, ok := rpc.Command.(*raft.RequestPreVoteRequest)
	return ok && req != nil && req.Term == 0
}

// renewal applies the sender rule of a role renewal: it comes from a
// member of the latest configuration other than this node, at the address
// the configuration gives it (docs/DESIGN.md, "What a valid Raft RPC is").
// What it reports is checked when it is answered (roleslease.go).
func (a *admission) renewal(rpc raft.RPC) *RefusedError {
	req := rpc.Command.(*raft.RequestPreVoteRequest)
	e := &RefusedError{Command: "RequestPreVote", ID: string(req.ID), Addr: string(req.Addr)}
	id, addr := raft.ServerID(req.ID), raft.ServerAddress(req.Addr)
	s, ok := find(a.configuration(), id)
	switch {
	case id == a.self:
		return e.malformed("a role renewal from this node's own ID")
	case !ok || s.Address != addr:
		e.Reason, e.Detail = RefusedNotMember, "a role renewal from a server that is not a member at that address"
		return e
	case req.LastLogTerm > renewFlagNoRoles && req.LastLogTerm != renewFlagProbe:
		return e.malformed("a role renewal with unknown flags %#x", req.LastLogTerm)
	}
	return nil
}

// member reports whether server id is in the latest configuration (any
// suffrage); known is false while there is none (joining).
func (a *admission) member(id string) (member, known bool) {
	conf := a.configuration()
	if len(conf.Servers) == 0 {
		return false, false
	}
	_, ok := find(conf, raft.ServerID(id))
	return ok, true
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
