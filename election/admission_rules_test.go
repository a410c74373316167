package election

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/transport"
)

// Each admission rule has a test of its own (so that mutant E5 dies): the term
// window, each content rule, each configuration rule. The sender rules
// (who may vote, append, send TimeoutNow) are TestAdmissionRules' and
// TestAdmissionVoteRules'.

func TestTermWindow(t *testing.T) {
	for _, c := range []struct {
		t, cur  uint64
		joining bool
		want    bool
	}{
		{5, 7, false, true},                          // lower: raft answers with its own term
		{7, 7, false, true},                          // same
		{8, 7, false, true},                          // the next election
		{7 + TermWindow, 7, false, true},             // a jump inside the window
		{8 + TermWindow, 7, false, false},            // one past it
		{JumpLimit, JumpLimit - 5, false, true},      // a jump up to the limit
		{JumpLimit + 1, JumpLimit - 5, false, false}, // a jump past the limit
		{JumpLimit + 1, JumpLimit, false, true},      // past the limit, one at a time
		{epoch.MaxTerm, epoch.MaxTerm - 1, false, true},
		{epoch.MaxTerm + 1, epoch.MaxTerm, false, false}, // never above MaxTerm
		{epoch.MaxTerm, 2, false, false},                 // a hostile peer's vote
		{epoch.MaxTerm - 1, 2, false, false},
		{1 << 40, 0, true, true}, // joining: any term up to the limit
		{JumpLimit + 1, 0, true, false},
		{1<<64 - 1, 1<<64 - 2, false, false},
	} {
		if got := termAdmissible(c.t, c.cur, c.joining); got != c.want {
			t.Errorf("termAdmissible(%d, %d, joining %v) = %v, want %v", c.t, c.cur, c.joining, got, c.want)
		}
	}
}

// TestWindowTop: the term a response beyond the window is clamped to is
// the highest one termAdmissible lets move the node, at the edges and at
// random current terms.
func TestWindowTop(t *testing.T) {
	curs := []uint64{0, 1, 7, TermWindow, JumpLimit - TermWindow - 1, JumpLimit - TermWindow, JumpLimit - 5,
		JumpLimit - 1, JumpLimit, JumpLimit + 1, epoch.MaxTerm - 1}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		curs = append(curs, rng.Uint64N(epoch.MaxTerm))
	}
	for _, cur := range curs {
		top, ok := windowTop(cur)
		if !ok || top <= cur || !termAdmissible(top, cur, false) || termAdmissible(top+1, cur, false) {
			t.Fatalf("windowTop(%d) = %d, %v: not the highest admissible term above it", cur, top, ok)
		}
	}
	if top, ok := windowTop(epoch.MaxTerm); ok {
		t.Fatalf("windowTop(MaxTerm) = %d: no term above MaxTerm is admissible", top)
	}
}

func confBytes(servers ...raft.Server) []byte {
	return raft.EncodeConfiguration(raft.Configuration{Servers: servers})
}

func TestValidConfiguration(t *testing.T) {
	v := func(id, addr string) raft.Server {
		return raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(addr)}
	}
	nv := func(id, addr string) raft.Server {
		return raft.Server{Suffrage: raft.Nonvoter, ID: raft.ServerID(id), Address: raft.ServerAddress(addr)}
	}
	var many []raft.Server
	for i := range MaxServers + 1 {
		many = append(many, v("s"+strings.Repeat("x", i%50)+string(rune('a'+i%26))+strings.Repeat("y", i/26), "a"+strings.Repeat("b", i)))
	}
	bad := raft.Server{Suffrage: 9, ID: "n2", Address: "b"}
	for _, c := range []struct {
		name string
		b    []byte
		ok   bool
	}{
		{"three voters", confBytes(v("n1", "a"), v("n2", "b"), v("n3", "c")), true},
		{"a voter and a non-voter", confBytes(v("n1", "a"), nv("n2", "b")), true},
		{"empty bytes", nil, false},
		{"not msgpack", []byte{0xc1}, false},
		{"truncated", confBytes(v("n1", "a"))[:5], false},
		{"no server", confBytes(), false},
		{"too many servers", confBytes(many...), false},
		{"no voter", confBytes(nv("n1", "a")), false},
		{"unknown suffrage", confBytes(v("n1", "a"), bad), false},
		{"empty ID", confBytes(v("", "a")), false},
		{"invalid ID", confBytes(v("n 1", "a")), false},
		{"empty address", confBytes(v("n1", "")), false},
		{"address too long", confBytes(v("n1", strings.Repeat("a", 256))), false},
		{"duplicate ID", confBytes(v("n1", "a"), v("n1", "b")), false},
		{"duplicate address", confBytes(v("n1", "a"), v("n2", "a")), false},
	} {
		if err := validConfiguration(c.b); (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok %v", c.name, err, c.ok)
		}
	}
}

// TestAdmissionContentRules checks each content rule of AppendEntries,
// RequestVote, RequestPreVote and InstallSnapshot on its own.
func TestAdmissionContentRules(t *testing.T) {
	a := &admission{}
	good := confBytes(raft.Server{Suffrage: raft.Voter, ID: "n1", Address: "a"})
	ent := func(i, tm uint64, typ raft.LogType) *raft.Log { return &raft.Log{Index: i, Term: tm, Type: typ} }
	aeq := func(prev, prevTerm, term uint64, es ...*raft.Log) *raft.AppendEntriesRequest {
		return &raft.AppendEntriesRequest{Term: term, PrevLogEntry: prev, PrevLogTerm: prevTerm, Entries: es}
	}
	snap := func(mod func(*raft.InstallSnapshotRequest)) *raft.InstallSnapshotRequest {
		r := &raft.InstallSnapshotRequest{SnapshotVersion: 1, Term: 5, LastLogIndex: 10, LastLogTerm: 4, Configuration: good, ConfigurationIndex: 3}
		if mod != nil {
			mod(r)
		}
		return r
	}
	many := make([]*raft.Log, MaxEntries+1)
	for i := range many {
		many[i] = ent(uint64(i+1), 1, raft.LogNoop)
	}
	for _, c := range []struct {
		name string
		cmd  any
		ok   bool
	}{
		{"heartbeat", aeq(0, 0, 5), true},
		{"entries in order", aeq(10, 3, 5, ent(11, 3, raft.LogCommand), ent(12, 4, raft.LogNoop), ent(13, 5, raft.LogBarrier)), true},
		{"a valid configuration entry", aeq(10, 3, 5, &raft.Log{Index: 11, Term: 5, Type: raft.LogConfiguration, Data: good}), true},
		{"1024 entries", aeq(0, 0, 5, many[:MaxEntries]...), true},
		{"1025 entries", aeq(0, 0, 5, many...), false},
		{"PrevLogTerm above Term", aeq(10, 6, 5), false},
		{"a nil entry", aeq(10, 3, 5, nil), false},
		{"a nil entry after a good one", aeq(10, 3, 5, ent(11, 3, raft.LogNoop), nil), false},
		{"an index gap", aeq(10, 3, 5, ent(12, 3, raft.LogNoop)), false},
		{"an index repeated", aeq(10, 3, 5, ent(11, 3, raft.LogNoop), ent(11, 3, raft.LogNoop)), false},
		{"index 0 after PrevLogEntry 2^64-1", aeq(1<<64-1, 3, 5, ent(0, 3, raft.LogNoop)), false},
		{"an entry term below PrevLogTerm", aeq(10, 3, 5, ent(11, 2, raft.LogNoop)), false},
		{"entry terms going down", aeq(10, 3, 5, ent(11, 4, raft.LogNoop), ent(12, 3, raft.LogNoop)), false},
		{"an entry term above Term", aeq(10, 3, 5, ent(11, 6, raft.LogNoop)), false},
		{"an entry of term 0", aeq(0, 0, 5, ent(1, 0, raft.LogNoop)), false},
		{"LogAddPeerDeprecated", aeq(10, 3, 5, ent(11, 3, raft.LogAddPeerDeprecated)), false},
		{"LogRemovePeerDeprecated", aeq(10, 3, 5, ent(11, 3, raft.LogRemovePeerDeprecated)), false},
		{"an unknown entry type", aeq(10, 3, 5, ent(11, 3, raft.LogType(42))), false},
		{"a configuration entry of bad data", aeq(10, 3, 5, &raft.Log{Index: 11, Term: 5, Type: raft.LogConfiguration, Data: []byte{0xc1}}), false},
		{"a vote", &raft.RequestVoteRequest{Term: 5, LastLogTerm: 5}, true},
		{"a vote with LastLogTerm above Term", &raft.RequestVoteRequest{Term: 5, LastLogTerm: 6}, false},
		{"a pre-vote", &raft.RequestPreVoteRequest{Term: 5, LastLogTerm: 4}, true},
		{"a pre-vote with LastLogTerm above Term", &raft.RequestPreVoteRequest{Term: 5, LastLogTerm: 6}, false},
		{"a snapshot", snap(nil), true},
		{"snapshot version 0", snap(func(r *raft.InstallSnapshotRequest) { r.SnapshotVersion = 0 }), false},
		{"snapshot version 2", snap(func(r *raft.InstallSnapshotRequest) { r.SnapshotVersion = 2 }), false},
		{"negative snapshot size", snap(func(r *raft.InstallSnapshotRequest) { r.Size = -1 }), false},
		{"snapshot LastLogTerm above Term", snap(func(r *raft.InstallSnapshotRequest) { r.LastLogTerm = 6 }), false},
		{"snapshot LastLogTerm 0", snap(func(r *raft.InstallSnapshotRequest) { r.LastLogTerm = 0 }), false},
		{"snapshot LastLogIndex 0", snap(func(r *raft.InstallSnapshotRequest) { r.LastLogIndex, r.ConfigurationIndex = 0, 0 }), false},
		{"snapshot ConfigurationIndex above LastLogIndex", snap(func(r *raft.InstallSnapshotRequest) { r.ConfigurationIndex = 11 }), false},
		{"snapshot configuration not msgpack", snap(func(r *raft.InstallSnapshotRequest) { r.Configuration = []byte{0xc1, 0xc1} }), false},
		{"snapshot configuration empty", snap(func(r *raft.InstallSnapshotRequest) { r.Configuration = nil }), false},
	} {
		err := a.content(raft.RPC{Command: c.cmd}, &RefusedError{})
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok %v", c.name, err, c.ok)
		}
		if err != nil && err.Reason != RefusedMalformed {
			t.Errorf("%s: reason %s, want malformed", c.name, err.Reason)
		}
	}
}

// TestAdmissionVoteRules: votes and pre-votes only from a voter of the
// latest configuration at its configured address — a stranger, a member
// that is no voter, and a voter's ID at another address are each refused
// as not_voter, and the voter itself is admitted.
func TestAdmissionVoteRules(t *testing.T) {
	c := newCluster(t, 3)
	ld, _ := c.leader()
	c.quietly("AddNonvoter nv", func() error {
		ld, _ = c.leader()
		return ld.el.Raft().AddNonvoter("nv", "nv", 0, 0).Error()
	})
	var f *node
	for _, nd := range c.nodes {
		if nd != ld {
			f = nd
			break
		}
	}
	waitFor(t, f.id+" to know nv", func() bool {
		_, ok := find(f.el.admit.configuration(), "nv")
		return ok
	})
	x := transport.NewInmem("x")
	x.Connect(f.mem)
	term := f.el.Raft().CurrentTerm()
	to := raft.ServerAddress(f.id)
	vote := func(id, addr string) func() error {
		return func() error {
			return x.RequestVote("", to, &raft.RequestVoteRequest{RPCHeader: hdr(id, addr), Term: term, LastLogIndex: 0, LastLogTerm: 0}, &raft.RequestVoteResponse{})
		}
	}
	preVote := func(id, addr string) func() error {
		return func() error {
			return x.RequestPreVote("", to, &raft.RequestPreVoteRequest{RPCHeader: hdr(id, addr), Term: term + 1, LastLogIndex: 0, LastLogTerm: 0}, &raft.RequestPreVoteResponse{})
		}
	}
	refusedAs(t, f, "RequestVote from a stranger", RefusedNotVoter, vote("mallory", "x"))
	refusedAs(t, f, "RequestPreVote from a stranger", RefusedNotVoter, preVote("mallory", "x"))
	refusedAs(t, f, "RequestVote from a non-voter member", RefusedNotVoter, vote("nv", "nv"))
	refusedAs(t, f, "RequestPreVote from a non-voter member", RefusedNotVoter, preVote("nv", "nv"))
	refusedAs(t, f, "RequestVote from a voter's ID at another address", RefusedNotVoter, vote(ld.id, "x"))
	// The voter itself, at a stale term and with an empty log (raft then
	// refuses the vote itself, changing nothing): admitted.
	refusedAs(t, f, "RequestVote from a voter", 0, vote(ld.id, ld.id))
}

// TestRenewalFromStrangerRefused: a RequestPreVote with term 0 is a role
// renewal, taken out before raft; only a member at its address may send
// one. Before this rule the roles code answered anyone's (the fault
// suite's forge counted those answers as accepted in the fault suite).
func TestRenewalFromStrangerRefused(t *testing.T) {
	ld, f, renew := renewalSender(t)
	refusedAs(t, ld, "a renewal from a stranger", RefusedNotMember, renew("mallory", "x", 0))
	refusedAs(t, ld, "a renewal without an ID", RefusedNotMember, renew("", "x", 0))
	refusedAs(t, ld, "a renewal from a member's ID at another address", RefusedNotMember, renew(f.id, "x", 0))
	refusedAs(t, ld, "a renewal claiming the leader itself", RefusedMalformed, renew(ld.id, ld.id, 0))
	reachesRoles(t, ld, "a renewal from member "+f.id, renew(f.id, f.id, 0))
}

// renewalSender starts a three-node cluster and returns its leader, a
// follower, and a sender of role renewals to the leader (a RequestPreVote
// with term 0, flags in LastLogTerm) under any claimed identity.
func renewalSender(t *testing.T) (ld, f *node, renew func(id, addr string, flags uint64) func() error) {
	c := newCluster(t, 3)
	ld, _ = c.leader()
	f = c.other(ld)
	x := transport.NewInmem("x")
	x.Connect(ld.mem)
	renew = func(id, addr string, flags uint64) func() error {
		return func() error {
			return x.RequestPreVote("", raft.ServerAddress(ld.id), &raft.RequestPreVoteRequest{RPCHeader: hdr(id, addr), Term: 0, LastLogIndex: 1, LastLogTerm: flags}, &raft.RequestPreVoteResponse{})
		}
	}
	return ld, f, renew
}

// reachesRoles checks that send's renewal passes admission and is answered
// by the roles code (here without a grant: the group has no roles).
func reachesRoles(t *testing.T, ld *node, what string, send func() error) {
	t.Helper()
	before := ld.el.Admission()
	if err := send(); err != nil && !errors.Is(err, errRenewalRefused) {
		t.Errorf("%s: %v, want an answer from the roles code", what, err)
	}
	after := ld.el.Admission()
	for r, n := range after.Refused {
		if n != before.Refused[r] {
			t.Errorf("%s: admission refused it as %s", what, r)
		}
	}
}

// TestAdmissionOneLeaderPerTerm: raft elects one leader per term, so at a
// node's own term only the leader it follows appends to it — another
// voter's AppendEntries of that term is refused as not_leader — and a
// leader takes no AppendEntries of its own term at all. Judged only when
// the term and the leader stayed the same around the sends.
func TestAdmissionOneLeaderPerTerm(t *testing.T) {
	c := newCluster(t, 3)
	x := transport.NewInmem("x")
	for _, nd := range c.nodes {
		x.Connect(nd.mem)
	}
	refusedNotLeader := func(nd *node, send func() error) (uint64, error) {
		before := nd.el.Admission().Refused[RefusedNotLeader]
		err := send()
		return nd.el.Admission().Refused[RefusedNotLeader] - before, err
	}
	for attempt := 1; ; attempt++ {
		ld, _ := c.leader()
		var fs []*node
		for _, nd := range c.nodes {
			if nd != ld {
				fs = append(fs, nd)
			}
		}
		f, g := fs[0], fs[1]
		waitFor(t, f.id+" to follow "+ld.id, func() bool {
			_, id := f.el.Raft().LeaderWithID()
			return string(id) == ld.id
		})
		term := ld.el.Raft().CurrentTerm()
		steady := func() bool {
			_, id := f.el.Raft().LeaderWithID()
			return string(id) == ld.id && f.el.Raft().CurrentTerm() == term &&
				ld.el.Raft().CurrentTerm() == term && ld.el.Raft().State() == raft.Leader
		}
		if !steady() {
			continue
		}
		nF, errF := refusedNotLeader(f, func() error {
			return x.AppendEntries("", raft.ServerAddress(f.id), &raft.AppendEntriesRequest{RPCHeader: hdr(g.id, g.id), Term: term}, &raft.AppendEntriesResponse{})
		})
		nL, errL := refusedNotLeader(ld, func() error {
			return x.AppendEntries("", raft.ServerAddress(ld.id), &raft.AppendEntriesRequest{RPCHeader: hdr(f.id, f.id), Term: term}, &raft.AppendEntriesResponse{})
		})
		// After the sends f's leader is not looked at: an admitted append
		// from g makes g its leader, which is the bug to report.
		if f.el.Raft().CurrentTerm() != term || ld.el.Raft().CurrentTerm() != term || ld.el.Raft().State() != raft.Leader {
			if attempt == 3 {
				t.Fatalf("could not judge: the leader or the term changed around the sends in %d attempts", attempt)
			}
			continue
		}
		if !errors.Is(errF, ErrRefused) || nF != 1 {
			t.Errorf("AppendEntries of term %d from voter %s to %s, which follows %s in that term: err %v, %d refusals as not_leader; want one", term, g.id, f.id, ld.id, errF, nF)
		}
		if !errors.Is(errL, ErrRefused) || nL != 1 {
			t.Errorf("AppendEntries of term %d from voter %s to %s, the leader of that term: err %v, %d refusals as not_leader; want one", term, f.id, ld.id, errL, nL)
		}
		return
	}
}

// TestRenewalUnknownFlagsRefused: a role renewal carries its flags in
// LastLogTerm: 1 (NoRoles), or exactly 2 (a leader's proof probe); one with
// any other value, even from a member at its address, is malformed.
func TestRenewalUnknownFlagsRefused(t *testing.T) {
	ld, f, renew := renewalSender(t)
	for _, flags := range []uint64{3, 4, 6, 1 << 63} {
		refusedAs(t, ld, fmt.Sprintf("a renewal from member %s with flags %#x", f.id, flags), RefusedMalformed, renew(f.id, f.id, flags))
	}
	// Flags 0 and 1 reach the roles code, not admission.
	for _, flags := range []uint64{0, renewFlagNoRoles} {
		reachesRoles(t, ld, fmt.Sprintf("a renewal from member %s with flags %#x", f.id, flags), renew(f.id, f.id, flags))
	}
	// A probe (for term 1, not the current one) is answered by the roles
	// code, refused.
	before := ld.el.Admission()
	if err := renew(f.id, f.id, renewFlagProbe)(); !errors.Is(err, errProbeRefused) {
		t.Errorf("a probe for another term: %v, want %v", err, errProbeRefused)
	}
	for r, n := range ld.el.Admission().Refused {
		if n != before.Refused[r] {
			t.Errorf("a probe: admission refused it as %s", r)
		}
	}
}

// TestAdmissionAppendFromStranger: AppendEntries only from a member of the
// configuration at its configured address; a stranger's is refused as
// not_member at any term — at this node's term, and at the next, which
// raft would otherwise adopt and follow the stranger in.
func TestAdmissionAppendFromStranger(t *testing.T) {
	c := newCluster(t, 3)
	ld, _ := c.leader()
	f := c.other(ld)
	x := transport.NewInmem("x")
	x.Connect(f.mem)
	term := f.el.Raft().CurrentTerm()
	for _, tm := range []uint64{term, term + 1} {
		refusedAs(t, f, fmt.Sprintf("AppendEntries of term %d from a stranger", tm), RefusedNotMember, func() error {
			return x.AppendEntries("", raft.ServerAddress(f.id), &raft.AppendEntriesRequest{RPCHeader: hdr("mallory", "x"), Term: tm}, &raft.AppendEntriesResponse{})
		})
	}
	if _, id := f.el.Raft().LeaderWithID(); id == "mallory" {
		t.Fatalf("%s follows the stranger", f.id)
	}
}

// TestResponseTermRule: the term raft sees in a response to one of its own
// RPCs (termSource.responseTerm). Inside the window it passes; beyond it,
// from one peer, raft sees the top of the window (it learns it is stale,
// and moves at most the window: one lying peer cannot move it further);
// once every other voter of three has answered with it, the whole term up
// to JumpLimit passes (a lagging node catches up).
func TestResponseTermRule(t *testing.T) {
	c := newCluster(t, 3)
	ld, _ := c.leader()
	f := ld.el.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	var others []raft.ServerAddress
	for _, s := range f.Configuration().Servers {
		if string(s.ID) != ld.id {
			others = append(others, s.Address)
		}
	}
	ts := ld.el.term
	// The expectations are relative to the current term: on a loaded
	// machine an election may move it mid-table, and the table runs again.
	for attempt := 1; ; attempt++ {
		cur := ld.el.Raft().CurrentTerm()
		var errs []string
		for _, tc := range []struct {
			what string
			from raft.ServerAddress
			t    uint64
			want uint64
			err  bool
		}{
			{"lower", others[0], cur - 1, cur - 1, false},
			{"inside the window", others[0], cur + TermWindow, cur + TermWindow, false},
			{"beyond it, one peer", others[0], cur + 3*TermWindow, cur + TermWindow, false},
			{"beyond it, the same peer again", others[0], cur + 3*TermWindow, cur + TermWindow, false},
			{"beyond it, the second peer too: a quorum", others[1], cur + 3*TermWindow, cur + 3*TermWindow, false},
			{"beyond the jump limit", others[0], JumpLimit + 1, cur + TermWindow, false},
			{"a stranger's address", "elsewhere:1", cur + 3*TermWindow + 1, cur + TermWindow, false},
		} {
			got, err := ts.responseTerm("AppendEntries", tc.from, tc.t)
			if (err != nil) != tc.err || got != tc.want {
				errs = append(errs, fmt.Sprintf("%s: responseTerm(%d) from current term %d = %d, %v; want %d (error %v)", tc.what, tc.t, cur, got, err, tc.want, tc.err))
			}
		}
		if ld.el.Raft().CurrentTerm() == cur {
			for _, e := range errs {
				t.Error(e)
			}
			return
		}
		if attempt == 5 {
			t.Fatalf("the term moved during each of %d attempts", attempt)
		}
	}
}
