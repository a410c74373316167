package election

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/transport"
)

// TestRemovedNodeKnows: a follower removed from a running cluster learns
// it was removed and says so — Removed, Status and Leadership report it,
// WaitLeader returns ErrRemoved, /readyz fails naming the reason, /livez
// holds (so a supervisor does not restart it in a loop), one log line says
// it — and still knows after a restart on its data dir. Lead does not give
// up: added again, the node is ready again, and when it leads, the Lead
// that was running all along runs its fn.
func TestRemovedNodeKnows(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	ld, _ := c.leader()
	var f *node
	for _, nd := range c.nodes {
		if nd != ld {
			f = nd
			break
		}
	}
	waitFor(t, f.id+" to follow a leader", func() bool { return f.el.Status().LeaderID != "" })
	// NoLeaderTimeout of 1ns: Live fails the moment a member knows no
	// leader — which a removed node does for good.
	h, err := f.el.Health(HealthConfig{NoLeaderTimeout: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	leadErr := make(chan error, 1)
	ran := make(chan epoch.Epoch, 16)
	lctx, stopLead := context.WithCancel(ctx)
	defer stopLead()
	go func() {
		leadErr <- f.el.Lead(lctx, func(lctx context.Context, ep epoch.Epoch) error {
			select {
			case ran <- ep:
			default:
			}
			<-lctx.Done()
			return nil
		})
	}()

	// It learns from the change that removes it: raft's last send, and
	// RemoveServer's own once the change commits (TestRemovedWhileReplicating).
	removeOnLeader(t, c, f.id)
	waitFor(t, f.id+" to learn it was removed", f.el.Removed)
	checkRemoved(t, f, h)
	if n := countLines(c, f.id, "removed from the cluster"); n != 1 {
		t.Errorf("%s logged %d lines saying it was removed, want 1", f.id, n)
	}

	select {
	case err := <-leadErr:
		t.Fatalf("Lead on the removed %s returned %v; want it to wait", f.id, err)
	default:
	}

	// A supervisor restarts it: it still knows.
	c.stop(f)
	if err := <-leadErr; !errors.Is(err, ErrClosed) {
		t.Fatalf("Lead on %s after Close: %v, want ErrClosed", f.id, err)
	}
	c.start(f)
	waitFor(t, f.id+" to know it was removed after a restart", f.el.Removed)
	// Lead, started while the node is removed, waits.
	leadErr2 := make(chan error, 1)
	go func() {
		leadErr2 <- f.el.Lead(lctx, func(lctx context.Context, ep epoch.Epoch) error {
			select {
			case ran <- ep:
			default:
			}
			<-lctx.Done()
			return nil
		})
	}()
	if h, err = f.el.Health(HealthConfig{NoLeaderTimeout: time.Nanosecond}); err != nil {
		t.Fatal(err)
	}
	checkRemoved(t, f, h)

	// Added again, it follows the leader and is ready.
	onLeader(t, c, "AddVoter("+f.id+")", func(nd *node) error { return nd.el.AddVoter(ctx, f.id, f.id) })
	waitFor(t, f.id+" to be ready again", func() bool { return h.Ready() == nil })
	if f.el.Removed() || f.el.Status().Removed {
		t.Fatalf("%s still reports Removed after it was added again", f.id)
	}
	onLeader(t, c, "TransferTo("+f.id+")", func(nd *node) error {
		if nd == f {
			return nil
		}
		return nd.el.TransferTo(ctx, f.id)
	})
	select {
	case ep := <-ran:
		if ep.Leader != f.id {
			t.Fatalf("Lead's fn on %s ran with %v", f.id, ep)
		}
	case err := <-leadErr2:
		t.Fatalf("Lead on %s returned %v", f.id, err)
	case <-time.After(waitLong):
		t.Fatalf("Lead's fn never ran on %s once it was added back and led", f.id)
	}
}

// TestRemovedWhileReplicating: a follower removed while the leader's
// replication to it is busy still learns it was removed, and its raft
// holds the change as committed, so it stops campaigning. raft v1.7.2
// drops its final send to a removed server when an AppendEntries to it is
// in flight as the change is appended (see tellRemoved); a stream of
// barriers on the leader keeps one in flight most of the time. Two
// followers of five are removed in turn.
func TestRemovedWhileReplicating(t *testing.T) {
	c := newCluster(t, 5)
	ld, _ := c.leader()
	defer keepReplicating(func() *Election { return ld.el }, c.ht)()
	removed := 0
	for _, f := range c.nodes {
		if f == ld || removed == 2 {
			continue
		}
		removed++
		waitFor(t, f.id+" to follow a leader", func() bool { return f.el.Status().LeaderID != "" })
		removeOnLeader(t, c, f.id)
		waitFor(t, f.id+" to learn it was removed", f.el.Removed)
		waitFor(t, f.id+"'s raft to hold its removal as committed and stop campaigning", func() bool {
			return countLines(c, f.id, "not part of stable configuration") > 0
		})
	}
}

// TestRemovedWhileReplicatingTLS: the same over TCP with mutual TLS, where
// the removed node admits the leader's send only from the member its
// certificate names.
func TestRemovedWhileReplicatingTLS(t *testing.T) {
	ca := newTLSCA(t)
	c := newTCPCluster(t, []string{"v1", "v2", "v3"}, func(id string) transport.Config {
		return transport.Config{TLS: ca.mutual(id), Timeout: 2 * time.Second}
	})
	ld, _ := c.leaderAbove(0)
	defer keepReplicating(func() *Election { return ld.el }, c.ht)()
	var f *tcpNode
	for _, nd := range c.nodes {
		if nd != ld {
			f = nd
			break
		}
	}
	if err := ld.el.RemoveServer(context.Background(), f.id); err != nil {
		t.Fatalf("RemoveServer(%s) on the leader: %v", f.id, err)
	}
	waitForUpTo(t, settleWait, f.id+" to learn it was removed", f.el.Removed)
}

// keepReplicating appends barriers on the Election leader returns (nil:
// none) until the returned stop is called, pausing for pause whenever
// there is none or it does not lead.
func keepReplicating(leader func() *Election, pause time.Duration) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			default:
			}
			if el := leader(); el == nil || el.raft.Barrier(waitLong).Error() != nil {
				select {
				case <-quit:
					return
				case <-time.After(pause): // not leading: wait for a leader
				}
			}
		}
	}()
	return func() { close(quit); <-done }
}

// checkRemoved checks everything a removed node reports.
func checkRemoved(t *testing.T, f *node, h *Health) {
	t.Helper()
	if st := f.el.Status(); !st.Removed {
		t.Errorf("Status().Removed is false on the removed node: %+v", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if _, err := f.el.WaitLeader(ctx); !errors.Is(err, ErrRemoved) {
		t.Errorf("WaitLeader on the removed node: %v, want ErrRemoved", err)
	}
	if err := h.Live(); err != nil {
		t.Errorf("Live on the removed node: %v, want nil (a restart would change nothing)", err)
	}
	err := h.Ready()
	if !errors.Is(err, ErrRemoved) || !errors.Is(err, ErrUnhealthy) {
		t.Errorf("Ready on the removed node: %v, want ErrRemoved and ErrUnhealthy", err)
	}
	for path, want := range map[string]int{"/livez": http.StatusOK, "/readyz": http.StatusServiceUnavailable} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != want {
			t.Errorf("GET %s on the removed node: %d %q, want %d", path, rec.Code, rec.Body.String(), want)
		}
		if want != http.StatusOK && !strings.Contains(rec.Body.String(), "removed from the cluster") {
			t.Errorf("GET %s on the removed node says %q, want the reason", path, rec.Body.String())
		}
	}
}

// countLines counts the node's recorded log lines containing msg.
func countLines(c *cluster, node, msg string) int {
	c.check.mu.Lock()
	defer c.check.mu.Unlock()
	n := 0
	for _, line := range c.check.tail {
		if strings.Contains(line, msg) && strings.Contains(line, `"node":"`+node+`"`) {
			n++
		}
	}
	return n
}

// removeOnLeader removes id on whichever node leads, again while it
// answers ErrNotLeader. A leader that loses leadership after it appended
// the change (raft's ErrLeadershipLost: it stepped down, say for lack of a
// quorum's contact under load) answers ErrNotLeader although the change
// may still commit: the next leader can have it in its log, and a retry
// answers ErrUnknownServer. Such a change may never have reached id (raft
// stops replicating to a removed server; see Removed: a node cut off while
// it is removed cannot know), so removeOnLeader then adds id back and
// removes it again, until one removal succeeds at once.
func removeOnLeader(t *testing.T, c *cluster, id string) {
	t.Helper()
	ctx := context.Background()
	for {
		unknownOutcome := false
		onLeader(t, c, "RemoveServer("+id+")", func(nd *node) error {
			err := nd.el.RemoveServer(ctx, id)
			switch {
			case errors.Is(err, ErrNotLeader) && !hasServer(t, nd, id):
				unknownOutcome = true
			case unknownOutcome && errors.Is(err, ErrUnknownServer) && !hasServer(t, nd, id):
				return nil
			}
			return err
		})
		if !unknownOutcome || !hasServer(t, c.byID(id), id) {
			return // done, or id received the change and will know
		}
		t.Logf("RemoveServer(%s): its leader stepped down during the change; adding %s back to remove it again", id, id)
		onLeader(t, c, "AddVoter("+id+") again", func(nd *node) error { return nd.el.AddVoter(ctx, id, id) })
		waitFor(t, id+" to follow a leader again", func() bool {
			n := c.byID(id)
			return !n.el.Removed() && n.el.Status().LeaderID != "" && n.el.Status().LeaderID != id
		})
	}
}
