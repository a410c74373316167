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
	n4 := c.join("n4")

	// On a follower: ErrNotLeader, naming the leader so callers can forward.
	// The test timeouts are short, so an election may fall between finding
	// the leader and asking a follower; then the follower knows no leader
	// (ErrNoLeader) or names the new one, and the check is repeated.
	waitFor(t, "a follower's refusal to name the current leader", func() bool {
		ld, _ := c.leader()
		var follower *node
		for _, nd := range c.nodes {
			if nd != ld && nd.up {
				follower = nd
				break
			}
		}
		err := follower.el.AddVoter(ctx, "n4", "n4")
		if errors.Is(err, ErrNoLeader) {
			return false
		}
		var nl *NotLeaderError
		if !errors.As(err, &nl) || !errors.Is(err, ErrNotLeader) {
			t.Fatalf("AddVoter on follower %s: %v, want *NotLeaderError", follower.id, err)
		}
		if err := follower.el.RemoveServer(ctx, "n4"); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("RemoveServer on follower %s: %v, want ErrNotLeader", follower.id, err)
		}
		if _, err := ld.el.Epoch(); err != nil {
			return false // leadership moved meanwhile: ask again
		}
		return nl.LeaderID == ld.id && nl.LeaderAddr == ld.id
	})

	// On the leader (whichever node leads when asked).
	onLeader := func(what string, op func(nd *node) error) *node {
		var done *node
		waitFor(t, what, func() bool {
			ld, _ := c.leader()
			err := op(ld)
			if errors.Is(err, ErrNotLeader) {
				return false
			}
			if err != nil {
				t.Fatalf("%s on leader %s: %v", what, ld.id, err)
			}
			done = ld
			return true
		})
		return done
	}
	ld, _ := c.leader()
	if err := ld.el.AddVoter(ctx, "bad id", "x"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("AddVoter with a bad ID: %v, want ErrInvalidArgument", err)
	}
	onLeader("AddVoter(n4)", func(nd *node) error { return nd.el.AddVoter(ctx, "n4", "n4") })
	waitFor(t, "n4 to follow a leader", func() bool { return n4.el.Status().LeaderID != "" })
	onLeader("n4 in the leader's configuration", func(nd *node) error {
		if !hasServer(t, nd, "n4") {
			return ErrNotLeader // not yet: look again
		}
		return nil
	})
	// A RemoveServer answered ErrNotLeader (its leader stepped down after
	// appending the change) may commit all the same: the next leader then
	// no longer knows n4, which is the removal done, not an error.
	asked := false
	ld = onLeader("RemoveServer(n4)", func(nd *node) error {
		err := nd.el.RemoveServer(ctx, "n4")
		if asked && errors.Is(err, ErrUnknownServer) {
			return nil
		}
		asked = true
		return err
	})
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
