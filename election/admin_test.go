package election

import (
	"context"
	"errors"
	"testing"

	"github.com/hashicorp/raft"
)

func TestAddVoterRemoveServer(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	ld, _ := c.leader()
	var follower *node
	for _, nd := range c.nodes {
		if nd != ld {
			follower = nd
			break
		}
	}
	waitFor(t, "the follower to know the leader", func() bool { return follower.el.Status().LeaderID == ld.id })

	n4 := c.join("n4")

	// On a follower: ErrNotLeader, naming the leader so callers can forward.
	err := follower.el.AddVoter(ctx, "n4", "n4")
	var nl *NotLeaderError
	if !errors.As(err, &nl) || !errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNoLeader) {
		t.Fatalf("AddVoter on a follower: %v, want *NotLeaderError", err)
	}
	if nl.LeaderID != ld.id || nl.LeaderAddr != ld.id {
		t.Fatalf("NotLeaderError names %s at %s, want %s", nl.LeaderID, nl.LeaderAddr, ld.id)
	}
	if err := follower.el.RemoveServer(ctx, "n4"); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("RemoveServer on a follower: %v, want ErrNotLeader", err)
	}
	if err := ld.el.AddVoter(ctx, "bad id", "x"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("AddVoter with a bad ID: %v, want ErrInvalidArgument", err)
	}

	if err := ld.el.AddVoter(ctx, "n4", "n4"); err != nil {
		t.Fatalf("AddVoter(n4): %v", err)
	}
	waitFor(t, "n4 to follow the leader", func() bool { return n4.el.Status().LeaderID == ld.id })
	if !hasServer(t, ld, "n4") {
		t.Fatal("n4 is not in the configuration after AddVoter")
	}
	if err := ld.el.RemoveServer(ctx, "n4"); err != nil {
		t.Fatalf("RemoveServer(n4): %v", err)
	}
	if hasServer(t, ld, "n4") {
		t.Fatal("n4 is still in the configuration after RemoveServer")
	}
}

func hasServer(t *testing.T, nd *node, id string) bool {
	t.Helper()
	f := nd.el.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatalf("GetConfiguration: %v", err)
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == id {
			return true
		}
	}
	return false
}

func TestNoLeaderError(t *testing.T) {
	c := newCluster(t, 3)
	ld, _ := c.leader()
	// Cut everyone off: nobody knows a leader any more.
	for _, nd := range c.nodes {
		nd.net.Isolate()
	}
	for _, nd := range c.nodes {
		waitFor(t, nd.id+" to know no leader", func() bool {
			return stateOf(nd) != raft.Leader && nd.el.Status().LeaderID == ""
		})
	}
	_, err := ld.el.Epoch()
	if !errors.Is(err, ErrNoLeader) || !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Epoch with no leader anywhere: %v, want ErrNoLeader and ErrNotLeader", err)
	}
	for _, nd := range c.nodes {
		nd.net.Heal()
	}
	c.leader()
}

func TestClose(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	ld, ep := c.leader()
	obs := ld.el.Observe(ctx)
	c.stop(ld) // hands over first

	// The others take over; the handover means a transfer (term+1).
	nw, nep := c.leaderAbove(ep.Term, ld)
	if nep.Term != ep.Term+1 {
		t.Logf("%s took over at %v after %v (not a handover)", nw.id, nep, ep)
	}
	for range obs { // drains to the close
	}
	if err := ld.el.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := ld.el.Epoch(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Epoch after Close: %v", err)
	}
	if _, err := ld.el.Token(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Token after Close: %v", err)
	}
	if _, ok := <-ld.el.Observe(ctx); ok {
		t.Fatal("Observe after Close returned an open channel")
	}
	if _, err := ld.el.WaitLeader(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("WaitLeader after Close: %v", err)
	}
	for name, err := range map[string]error{
		"Resign":       ld.el.Resign(ctx),
		"TransferTo":   ld.el.TransferTo(ctx, nw.id),
		"AddVoter":     ld.el.AddVoter(ctx, "n9", "n9"),
		"RemoveServer": ld.el.RemoveServer(ctx, nw.id),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	if s := ld.el.Status(); s.State != raft.Shutdown || !s.Epoch.IsZero() {
		t.Fatalf("Status after Close: %+v", s)
	}
}

func TestContextStopsTheWait(t *testing.T) {
	c := newCluster(t, 3)
	ld, _ := c.leader()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ld.el.AddVoter(ctx, "n9", "n9"); !errors.Is(err, context.Canceled) {
		t.Fatalf("AddVoter with a cancelled ctx: %v", err)
	}
	if _, err := ld.el.WaitLeader(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitLeader with a cancelled ctx: %v", err)
	}
}
