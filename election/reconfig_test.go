package election

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestCheckQuorum(t *testing.T) {
	v := func(id string) raft.Server {
		return raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(id)}
	}
	nv := func(id string) raft.Server {
		s := v(id)
		s.Suffrage = raft.Nonvoter
		return s
	}
	up := func(ids ...string) func(string) bool { return func(id string) bool { return slices.Contains(ids, id) } }
	for _, tc := range []struct {
		name string
		next []raft.Server
		up   func(string) bool
		ok   bool
	}{
		{"three of three", []raft.Server{v("a"), v("b"), v("c")}, up("a", "b", "c"), true},
		{"two of three", []raft.Server{v("a"), v("b"), v("c")}, up("a", "b"), true},
		{"one of three", []raft.Server{v("a"), v("b"), v("c")}, up("a"), false},
		// The wedge: three voters with one dead, a fourth not running.
		{"two of four", []raft.Server{v("a"), v("b"), v("c"), v("d")}, up("a", "b"), false},
		{"three of four", []raft.Server{v("a"), v("b"), v("c"), v("d")}, up("a", "b", "d"), true},
		{"two of two", []raft.Server{v("a"), v("b")}, up("a", "b"), true},
		{"one of two", []raft.Server{v("a"), v("b")}, up("a"), false},
		{"non-voters do not count", []raft.Server{v("a"), v("b"), v("c"), nv("d"), nv("e")}, up("a", "d", "e"), false},
		{"unreachable non-voters do not matter", []raft.Server{v("a"), v("b"), nv("d")}, up("a", "b"), true},
		{"no voter", []raft.Server{nv("a")}, up("a"), false},
	} {
		err := checkQuorum(tc.next, tc.up)
		if (err == nil) != tc.ok {
			t.Errorf("%s: checkQuorum = %v, want ok %v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrQuorumAtRisk) {
			t.Errorf("%s: %v does not match ErrQuorumAtRisk", tc.name, err)
		}
	}
}

// leaderOp runs op on whichever node leads, again while leadership moved
// under it (ErrNotLeader, the change refused or in flight: each operation
// here is safe to repeat), and returns its error otherwise.
func leaderOp(t *testing.T, c *cluster, what string, op func(ld *node) error) (*node, error) {
	t.Helper()
	var (
		res error
		on  *node
	)
	waitFor(t, what, func() bool {
		ld, _ := c.leader()
		err := op(ld)
		if errors.Is(err, ErrNotLeader) {
			return false
		}
		res, on = err, ld
		return true
	})
	return on, res
}

// suffrage returns id's suffrage in nd's latest configuration, and false
// if it is not a member.
func suffrage(t *testing.T, nd *node, id string) (raft.ServerSuffrage, bool) {
	t.Helper()
	f := nd.el.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatalf("GetConfiguration on %s: %v", nd.id, err)
	}
	s, ok := find(f.Configuration(), raft.ServerID(id))
	return s.Suffrage, ok
}

// electsAgain makes the current leader resign and waits for a leader of a
// higher term: the cluster can still elect.
func electsAgain(t *testing.T, c *cluster) {
	t.Helper()
	ld, ep := c.leader()
	rctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if err := ld.el.Resign(rctx); err != nil {
		t.Fatalf("Resign(%s): %v", ld.id, err)
	}
	c.leaderAbove(ep.Term, nil)
}

// TestJoinUnreachableNoWedge is the wedge raft's own AddVoter makes: three
// voters, one dead for good, a fourth added as a voter before its process
// runs. With AddVoter making it a voter at once, two of four voters are
// left and the cluster never elects again. Now the fourth stays a
// non-voter that has not caught up, the call says so, the cluster keeps
// electing, and once the fourth runs the same call promotes it.
func TestJoinUnreachableNoWedge(t *testing.T) {
	c := newCluster(t, 3)
	ld, _ := c.leader()
	c.crash(c.other(ld)) // dead for good
	on, err := leaderOp(t, c, "AddVoter(n4) while n4 is not running", func(ld *node) error {
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		return ld.el.AddVoter(ctx, "n4", "n4")
	})
	var ce *ChangeError
	if !errors.Is(err, ErrNotCaughtUp) || !errors.As(err, &ce) || ce.State != ChangeRefused {
		t.Fatalf("AddVoter(n4) while n4 is down: %v, want a refused *ChangeError matching ErrNotCaughtUp", err)
	}
	if s, ok := suffrage(t, on, "n4"); !ok || s != raft.Nonvoter {
		t.Fatalf("n4 after the refused promotion: member %v, suffrage %v; want a non-voter", ok, s)
	}
	electsAgain(t, c)
	electsAgain(t, c)

	n4 := c.join("n4")
	onLeader(t, c, "AddVoter(n4) once it runs", func(ld *node) error {
		return ld.el.AddVoter(context.Background(), "n4", "n4")
	})
	waitFor(t, "n4 a voter following a leader", func() bool {
		s, ok := suffrage(t, n4, "n4")
		return ok && s == raft.Voter && n4.el.Status().LeaderID != ""
	})
	electsAgain(t, c)
}

// TestReplaceServer replaces a dead voter in one call, and the new voter
// then helps elect: with a second old voter gone, the two left (one of them
// the new one) elect only if the new one votes.
func TestReplaceServer(t *testing.T) {
	c := newCluster(t, 3)
	ld, _ := c.leader()
	dead := c.other(ld)
	c.crash(dead)
	n4 := c.join("n4")
	onLeader(t, c, "ReplaceServer("+dead.id+", n4)", func(ld *node) error {
		return ld.el.ReplaceServer(context.Background(), dead.id, Member{ID: "n4", Addr: "n4"})
	})
	ld, _ = c.leader()
	if _, ok := suffrage(t, ld, dead.id); ok {
		t.Fatalf("%s is still a member after ReplaceServer", dead.id)
	}
	if s, ok := suffrage(t, ld, "n4"); !ok || s != raft.Voter {
		t.Fatalf("n4 after ReplaceServer: member %v, suffrage %v; want a voter", ok, s)
	}
	// Again: every step is done, nothing changes.
	onLeader(t, c, "ReplaceServer again", func(ld *node) error {
		return ld.el.ReplaceServer(context.Background(), dead.id, Member{ID: "n4", Addr: "n4"})
	})
	waitFor(t, "n4 to follow "+ld.id, func() bool { return n4.el.Status().LeaderID == ld.id })
	_, ep := c.leader()
	c.crash(ld) // the two left, n4 among them, must elect: 2 of 3
	c.leaderAbove(ep.Term, ld)
}

// TestReplaceServerUnreachable: the new server is not running, or runs at
// another address than the one given (a wrong -advertise). The
// replacement is refused, the non-voter it added goes again, the old voter
// stays, and the cluster keeps electing.
func TestReplaceServerUnreachable(t *testing.T) {
	c := newCluster(t, 3)
	ld, _ := c.leader()
	dead := c.other(ld)
	c.crash(dead)
	c.join("n5") // runs at n5; given below as n4's address "wrong"
	for _, m := range []Member{{ID: "n4", Addr: "n4"}, {ID: "n5", Addr: "wrong"}} {
		on, err := leaderOp(t, c, "ReplaceServer("+dead.id+", "+m.ID+" at "+m.Addr+")", func(ld *node) error {
			ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
			defer cancel()
			return ld.el.ReplaceServer(ctx, dead.id, m)
		})
		var ce *ChangeError
		if !errors.Is(err, ErrNotCaughtUp) || !errors.As(err, &ce) || ce.State != ChangeRefused {
			t.Fatalf("ReplaceServer with %s at %s unreachable: %v, want a refused *ChangeError matching ErrNotCaughtUp", m.ID, m.Addr, err)
		}
		if _, ok := suffrage(t, on, m.ID); ok {
			t.Fatalf("%s is still a member after the refused replacement (%v)", m.ID, err)
		}
		if s, ok := suffrage(t, on, dead.id); !ok || s != raft.Voter {
			t.Fatalf("%s after the refused replacement: member %v, suffrage %v; want a voter", dead.id, ok, s)
		}
		electsAgain(t, c)
	}
}

// TestRemoveRefusedWithoutReachableQuorum: three voters, one dead;
// removing a live one would leave the leader and the dead one, one
// reachable voter of two. Refused, configuration unchanged; removing the
// dead one is allowed.
func TestRemoveRefusedWithoutReachableQuorum(t *testing.T) {
	c := newCluster(t, 3)
	ld, _ := c.leader()
	dead := c.other(ld)
	c.crash(dead)
	var live *node
	for _, nd := range c.nodes {
		if nd != ld && nd != dead {
			live = nd
		}
	}
	on, err := leaderOp(t, c, "RemoveServer("+live.id+")", func(ld *node) error {
		// If live leads by now, it would remove itself: refused alike.
		return ld.el.RemoveServer(context.Background(), live.id)
	})
	var ce *ChangeError
	if !errors.Is(err, ErrQuorumAtRisk) || !errors.As(err, &ce) || ce.State != ChangeRefused {
		t.Fatalf("RemoveServer(%s) with %s dead: %v, want a refused *ChangeError matching ErrQuorumAtRisk", live.id, dead.id, err)
	}
	if s, ok := suffrage(t, on, live.id); !ok || s != raft.Voter {
		t.Fatalf("%s after the refused removal: member %v, suffrage %v", live.id, ok, s)
	}
	// Not removeOnLeader: it adds back a node whose removal's outcome is
	// unknown, and a dead node can no longer be added as a voter.
	waitFor(t, dead.id+" removed", func() bool {
		ld, _ := c.leader()
		err := ld.el.RemoveServer(context.Background(), dead.id)
		return err == nil || errors.Is(err, ErrUnknownServer)
	})
	electsAgain(t, c)
}

// fakeFuture is a raft.IndexFuture with a fixed answer (nil err and block:
// never answers).
type fakeFuture struct {
	err   error
	index uint64
	block chan struct{}
}

func (f fakeFuture) Error() error {
	if f.block != nil {
		<-f.block
	}
	return f.err
}
func (f fakeFuture) Index() uint64 { return f.index }

// TestChangeStates: how a change that did not commit is reported.
func TestChangeStates(t *testing.T) {
	c := newCluster(t, 1)
	ld, _ := c.leader()
	e := ld.el
	bg := context.Background()
	before := e.raft.LastIndex()
	for _, tc := range []struct {
		name  string
		f     fakeFuture
		ctx   time.Duration
		state ChangeState
		is    error
		index func(uint64) bool
	}{
		{"refused by raft before appending", fakeFuture{err: raft.ErrNotLeader}, 0, ChangeRefused, ErrNotLeader, func(i uint64) bool { return i == 0 }},
		{"leadership lost after appending", fakeFuture{err: raft.ErrLeadershipLost, index: 42}, 0, ChangeInFlight, ErrNotLeader, func(i uint64) bool { return i == 42 }},
		{"ctx ended while pending", fakeFuture{block: make(chan struct{})}, 50 * time.Millisecond, ChangeInFlight, context.DeadlineExceeded,
			func(i uint64) bool { return i > before }},
		{"configuration changed since", fakeFuture{err: errors.New("configuration changed since 3 (latest is 5)")}, 0, ChangeRefused, nil, func(i uint64) bool { return i == 0 }},
	} {
		ctx, cancel := bg, context.CancelFunc(func() {})
		if tc.ctx > 0 {
			ctx, cancel = context.WithTimeout(bg, tc.ctx)
		}
		_, err := e.change(ctx, tc.name, func() raft.IndexFuture { return tc.f })
		cancel()
		if tc.f.block != nil {
			close(tc.f.block)
		}
		var ce *ChangeError
		if !errors.As(err, &ce) || ce.State != tc.state || !tc.index(ce.Index) || (tc.is != nil && !errors.Is(err, tc.is)) {
			t.Errorf("%s: %v (%+v), want state %v matching %v", tc.name, err, ce, tc.state, tc.is)
		}
	}
	if _, err := e.change(bg, "ok", func() raft.IndexFuture { return fakeFuture{index: 7} }); err != nil {
		t.Errorf("a committed change: %v", err)
	}
}
