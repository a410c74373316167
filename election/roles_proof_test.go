package election

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestRolesDeposedLeaderNotRenewed: a leader that hears nothing from the others while
// answers to heartbeats it sent before the cut are still on their way (as
// in TestRaftVerifyLeaderCountsLateAnswers, now under the election) does
// not renew its own role lease once a newer leader has been elected, even
// when those late answers arrive during its proof round. Seen failing with
// raft's VerifyLeader as the proof: the late answers "verify" the deposed
// leader, which then holds its roles for another lease beside the new
// owners.
func TestRolesDeposedLeaderNotRenewed(t *testing.T) {
	roles := roleNames(6)
	var hold atomic.Pointer[holdAnswers]
	t.Cleanup(func() { // last, once every node stopped
		if h := hold.Load(); h != nil {
			h.shut()
		}
	})
	c, _ := newRoleCluster(t, 3, func(nd *node, cfg *Config) {
		withRoles(roles, 30*time.Second)(nd, cfg) // renewals every 9.6 s: rarely a round in progress at the cut
		if nd.id == "n1" {
			// The leader to depose: slow to notice that nobody answers
			// (it steps down 2 s after its last contact); heartbeats
			// every 200-400 ms.
			cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 2*time.Second, 2*time.Second, 2*time.Second
			h := &holdAnswers{Transport: cfg.Transport}
			hold.Store(h)
			cfg.Transport = h
		} else {
			cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 600*time.Millisecond, 600*time.Millisecond, 600*time.Millisecond
		}
	})
	t.Cleanup(func() { hold.Load().stop() }) // before the nodes stop: raft waits for a held call
	n1, n2, n3 := c.byID("n1"), c.byID("n2"), c.byID("n3")
	rs := n1.el.roles
	ctx := context.Background()
	// The hook runs in every proof round of n1 once it is issued; armed, it
	// lets the held answers arrive during that round.
	var armed, fired atomic.Bool
	var u0 atomic.Int64
	hook := func() {
		if armed.Load() && fired.CompareAndSwap(false, true) {
			u0.Store(int64(rs.leaseUntil()))
			hold.Load().release()
		}
	}
	rs.proofHook.Store(&hook)
	defer rs.proofHook.Store(nil)
	for attempt := 1; ; attempt++ {
		if attempt > 5 {
			t.Fatalf("in %d attempts the scenario never came about", attempt-1)
		}
		h := hold.Load()
		h.stop()
		armed.Store(false)
		fired.Store(false)
		onServingLeader(t, c, "n1 to lead", func(ld *node) error {
			if ld == n1 {
				return nil
			}
			_ = ld.el.TransferTo(ctx, "n1")
			return errRetry // look again: the serving leader must be n1
		})
		term, ok := n1.el.held()
		if !ok {
			continue
		}
		waitFor(t, "n1's own lease", func() bool { return rs.leaseHolds() })
		h.hold() // n1 hears nothing from now on; its probes still reach the others
		waitFor(t, "a held answer from each peer", func() bool { return h.heldTo() == 2 })
		waitFor(t, "a newer leader", func() bool {
			for _, nd := range []*node{n2, n3} {
				if nd.el.Raft().State() == raft.Leader && nd.el.Raft().CurrentTerm() > term {
					return true
				}
			}
			return n1.el.Raft().State() != raft.Leader
		})
		if t2, ok := n1.el.held(); !ok || t2 != term {
			t.Logf("attempt %d: n1 stepped down before a newer leader was elected; again", attempt)
			continue
		}
		armed.Store(true)
		answered := make(chan bool, 1)
		rs.enqueue(renewal{id: n1.id, addr: n1.el.localAddr, applied: rs.t.applied(), recv: rs.clk(),
			answer: func(g bool, _ uint64) { answered <- g }})
		var granted bool
		waitFor(t, "the deposed leader's renewal answered", func() bool {
			select {
			case granted = <-answered:
				return true
			default:
				return false
			}
		})
		if !fired.Load() {
			// A round begun before the newer leader won held the service
			// until n1 stepped down: the renewal met no proof round.
			t.Logf("attempt %d: the renewal was answered without a proof round (granted %v); again", attempt, granted)
			continue
		}
		if granted {
			t.Errorf("n1, deposed (a leader of a newer term exists), granted itself a renewal")
		}
		if u := rs.leaseUntil(); int64(u) > u0.Load() {
			t.Errorf("n1, deposed, extended its lease from %v to %v", time.Duration(u0.Load()), u)
		}
		h.stop()
		return
	}
}
