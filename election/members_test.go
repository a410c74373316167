package election

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
)

// configOf returns the latest configuration's index and its
// servers on el: a configuration change (even one that changes nothing)
// appends to the log.
func configOf(t *testing.T, el *Election) (uint64, []raft.Server) {
	t.Helper()
	f := el.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatalf("GetConfiguration: %v", err)
	}
	// The configuration's own index: other entries (metadata, the roles
	// leader's Barrier) may be appended meanwhile without any change.
	return f.Index(), f.Configuration().Servers
}

// TestMembershipRefusesBadInput: on a one-node TCP cluster (the issue's
// case: a /join with {"id":"n5","addr":"nonsense"} was accepted and cost
// the only node its quorum for good), every unusable membership change is
// refused with its sentinel before raft sees it: the configuration and
// its index stay as they were and the node keeps its epoch.
func TestMembershipRefusesBadInput(t *testing.T) {
	c := newTCPCluster(t, []string{"n1"}, nil)
	ld, ep := c.leaderAbove(0)
	ctx := context.Background()
	idx0, servers0 := configOf(t, ld.el)
	el := ld.el
	good := "127.0.0.1:7101"
	for _, tc := range []struct {
		name string
		op   func() error
		want []error
		text string
	}{
		{"addr nonsense", func() error { return el.AddVoter(ctx, "n5", "nonsense") }, []error{ErrInvalidAddress, ErrInvalidArgument}, "not host:port"},
		{"addr empty", func() error { return el.AddVoter(ctx, "n5", "") }, []error{ErrInvalidAddress, ErrInvalidArgument}, "empty"},
		{"addr without port", func() error { return el.AddVoter(ctx, "n5", "127.0.0.1") }, []error{ErrInvalidAddress}, "not host:port"},
		{"addr port 0", func() error { return el.AddVoter(ctx, "n5", "127.0.0.1:0") }, []error{ErrInvalidAddress}, "port must be"},
		{"addr port too big", func() error { return el.AddVoter(ctx, "n5", "127.0.0.1:65536") }, []error{ErrInvalidAddress}, "port must be"},
		{"addr port not a number", func() error { return el.AddVoter(ctx, "n5", "127.0.0.1:raft") }, []error{ErrInvalidAddress}, "port must be"},
		{"addr without host", func() error { return el.AddVoter(ctx, "n5", ":7101") }, []error{ErrInvalidAddress}, "no usable host"},
		{"addr is a URL", func() error { return el.AddVoter(ctx, "n5", "http://127.0.0.1:7101") }, []error{ErrInvalidAddress}, ""},
		{"nonvoter addr nonsense", func() error { return el.AddNonvoter(ctx, "n5", "nonsense") }, []error{ErrInvalidAddress}, "not host:port"},
		{"id invalid", func() error { return el.AddVoter(ctx, "n 5", good) }, []error{ErrInvalidArgument}, "ID"},
		{"id empty", func() error { return el.AddNonvoter(ctx, "", good) }, []error{ErrInvalidArgument}, "ID"},
		{"meta too long", func() error {
			return el.AddMember(ctx, Member{ID: "n5", Addr: good, Voter: true, Meta: strings.Repeat("x", MaxMetaLen+1)})
		}, []error{ErrInvalidArgument}, "MaxMetaLen"},
		{"duplicate id at another addr", func() error { return el.AddVoter(ctx, "n1", good) }, []error{ErrDuplicateMember}, "already a member"},
		{"duplicate addr under another id", func() error { return el.AddVoter(ctx, "n5", ld.addr) }, []error{ErrDuplicateMember}, "already belongs"},
		{"nonvoter over a voter", func() error { return el.AddNonvoter(ctx, "n1", ld.addr) }, []error{ErrDuplicateMember}, "already a voter"},
		{"nonvoter at a voter's addr", func() error { return el.AddNonvoter(ctx, "n5", ld.addr) }, []error{ErrDuplicateMember}, "already belongs"},
		{"remove the last voter", func() error { return el.RemoveServer(ctx, "n1") }, []error{ErrLastVoter}, "last voter"},
		{"remove an unknown id", func() error { return el.RemoveServer(ctx, "n9") }, []error{ErrUnknownServer}, "n9"},
		{"remove an invalid id", func() error { return el.RemoveServer(ctx, "") }, []error{ErrInvalidArgument}, "ID"},
		{"re-add as it is", func() error { return el.AddVoter(ctx, "n1", ld.addr) }, nil, ""},
	} {
		err := tc.op()
		if tc.want == nil && err != nil {
			t.Errorf("%s: %v, want nil", tc.name, err)
		}
		if tc.want != nil && err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
		for _, w := range tc.want {
			if !errors.Is(err, w) {
				t.Errorf("%s: %v, want %v", tc.name, err, w)
			}
		}
		if err != nil && !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: %q does not say %q", tc.name, err, tc.text)
		}
		if idx, servers := configOf(t, el); idx != idx0 || !slices.Equal(servers, servers0) {
			t.Fatalf("%s changed the configuration: index %d %v, was %d %v", tc.name, idx, servers, idx0, servers0)
		}
	}
	if got, err := el.Epoch(); err != nil || got != ep {
		t.Fatalf("after the refused changes Epoch() = %v, %v; want %v", got, err, ep)
	}
}

// TestMembershipRefusesOnFollower: a follower checks the input too, and
// names the leader for a valid request.
func TestMembershipRefusesOnFollower(t *testing.T) {
	c := newCluster(t, 3)
	ld, _ := c.leader()
	var f *node
	for _, nd := range c.nodes {
		if nd != ld {
			f = nd
			break
		}
	}
	ctx := context.Background()
	if err := f.el.AddVoter(ctx, "n5", ""); !errors.Is(err, ErrInvalidAddress) {
		t.Fatalf("AddVoter with an empty address on a follower: %v, want ErrInvalidAddress", err)
	}
	if err := f.el.AddNonvoter(ctx, "n5", "n5"); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("AddNonvoter on a follower: %v, want ErrNotLeader", err)
	}
}

// TestAddNonvoter: a non-voter joins, is listed as one, follows the leader
// and learns its metadata, never stands or leads through two leadership
// transfers, holds no epoch; promoted with AddVoter it becomes a voter.
func TestAddNonvoter(t *testing.T) {
	c := newMetaCluster(t, 3)
	ctx := context.Background()
	nv := c.join("n4")
	var mu sync.Mutex
	var states []raft.RaftState
	obs := raft.NewObserver(make(chan raft.Observation, 1), false, func(o *raft.Observation) bool {
		if s, ok := o.Data.(raft.RaftState); ok {
			mu.Lock()
			states = append(states, s)
			mu.Unlock()
		}
		return false
	})
	nv.el.Raft().RegisterObserver(obs)
	defer nv.el.Raft().DeregisterObserver(obs)

	onLeader(t, c, "AddNonvoter(n4)", func(ld *node) error { return ld.el.AddNonvoter(ctx, "n4", "n4") })
	ld, _ := c.leader()
	ms, err := ld.el.Members()
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(ms, func(m Member) bool { return m.ID == "n4" }); i < 0 || ms[i].Voter || ms[i].Addr != "n4" {
		t.Fatalf("Members() = %+v, want n4 at n4 as a non-voter", ms)
	}
	for range 2 {
		ld, ep := c.leader()
		waitFor(t, "the non-voter follows "+ld.id+" and knows its metadata", func() bool {
			st := nv.el.Status()
			return st.LeaderID == ld.id && st.LeaderMeta == metaOf(ld.id)
		})
		if _, err := nv.el.Epoch(); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("Epoch() on the non-voter: %v, want ErrNotLeader", err)
		}
		rctx, cancel := context.WithTimeout(ctx, waitLong)
		err := ld.el.Resign(rctx)
		cancel()
		if err != nil {
			t.Fatalf("Resign(%s): %v", ld.id, err)
		}
		c.leaderAbove(ep.Term, nil)
	}
	mu.Lock()
	if slices.Contains(states, raft.Candidate) || slices.Contains(states, raft.Leader) {
		t.Errorf("the non-voter went through %v", states)
	}
	mu.Unlock()

	onLeader(t, c, "AddVoter(n4) promotes", func(ld *node) error { return ld.el.AddVoter(ctx, "n4", "n4") })
	waitFor(t, "n4 listed as a voter", func() bool {
		ms, err := nv.el.Members()
		i := slices.IndexFunc(ms, func(m Member) bool { return m.ID == "n4" })
		return err == nil && i >= 0 && ms[i].Voter
	})
}

// onLeader runs op on whichever node leads, again while it answers
// ErrNotLeader (leadership moved between finding the leader and asking).
func onLeader(t *testing.T, c *cluster, what string, op func(nd *node) error) {
	t.Helper()
	waitFor(t, what, func() bool {
		ld, _ := c.leader()
		err := op(ld)
		if errors.Is(err, ErrNotLeader) {
			return false
		}
		if err != nil {
			t.Fatalf("%s on %s: %v", what, ld.id, err)
		}
		return true
	})
}
