package election

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/transport"
)

// roleRuns records which LeadRole functions run now: per role, per node,
// the epoch its running call got. A node's calls for one role never
// overlap, so one entry per (role, node) is enough.
type roleRuns struct {
	mu      sync.Mutex
	running map[string]map[string]epoch.Epoch
	starts  map[string]int // role -> calls started, on every node
	// onEnd, if set, runs in fn when its context has ended (under no lock).
	onEnd func(node, role string, ep epoch.Epoch)
	stop  []context.CancelFunc
	wg    sync.WaitGroup
}

func newRoleRuns() *roleRuns {
	return &roleRuns{running: make(map[string]map[string]epoch.Epoch), starts: make(map[string]int)}
}

// lead runs LeadRole on nd for every role until the test ends or nd stops.
func (rr *roleRuns) lead(tb testing.TB, nd *node, roles []string) {
	tb.Helper()
	el, id := nd.el, nd.id
	ctx, cancel := context.WithCancel(context.Background())
	rr.mu.Lock()
	rr.stop = append(rr.stop, cancel)
	rr.mu.Unlock()
	for _, r := range roles {
		rr.wg.Add(1)
		go func() {
			defer rr.wg.Done()
			_ = el.LeadRole(ctx, r, func(ctx context.Context, ep epoch.Epoch) error {
				rr.mu.Lock()
				if rr.running[r] == nil {
					rr.running[r] = make(map[string]epoch.Epoch)
				}
				rr.running[r][id] = ep
				rr.starts[r]++
				rr.mu.Unlock()
				<-ctx.Done()
				if rr.onEnd != nil {
					rr.onEnd(id, r, ep)
				}
				rr.mu.Lock()
				delete(rr.running[r], id)
				rr.mu.Unlock()
				return nil
			})
		}()
	}
}

// close stops every LeadRole call and waits for them.
func (rr *roleRuns) close() {
	rr.mu.Lock()
	stop := rr.stop
	rr.mu.Unlock()
	for _, cancel := range stop {
		cancel()
	}
	rr.wg.Wait()
}

// live reports whether every role has exactly one node running its
// function, and that node holds the role now under the epoch it runs with
// (the liveness oracle of docs/DESIGN.md, "Liveness"); if not, it says
// which role is not.
func (rr *roleRuns) live(c *cluster, roles []string) (bool, string) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	for _, r := range roles {
		run := rr.running[r]
		if len(run) != 1 {
			return false, fmt.Sprintf("role %s runs on %d nodes (%v)", r, len(run), run)
		}
		for id, ep := range run {
			nd := c.byID(id)
			if !nd.up {
				return false, fmt.Sprintf("role %s runs on stopped %s", r, id)
			}
			if cur, err := nd.el.RoleEpoch(r); err != nil || cur != ep {
				return false, fmt.Sprintf("role %s runs on %s under %v, which holds %v (%v)", r, id, ep, cur, err)
			}
		}
	}
	return true, ""
}

// waitLive waits until rr.live holds.
func waitLive(tb testing.TB, c *cluster, rr *roleRuns, roles []string, what string) {
	tb.Helper()
	var why string
	if !pollUntil(time.Now().Add(waitLong), func() bool {
		ok, w := rr.live(c, roles)
		why = w
		return ok
	}) {
		tb.Fatalf("%s: no full liveness after %v: %s", what, waitLong, why)
	}
}

// TestRolesLeadRoleAfterLeaderCrash: at the default RoleLease (2 ×
// HeartbeatTimeout) a leader crash lets every survivor's lease lapse during
// the election; the new leader rightly moves no role of a live member, and
// the survivors get their leases back on the same grants. LeadRole must run
// its function again for every such role: after each crash every role has
// exactly one node whose function runs, and that node holds it. Seen
// failing with LeadRole running its function at most once per grant.
func TestRolesLeadRoleAfterLeaderCrash(t *testing.T) {
	roles := roleNames(12)
	c, _ := newRoleCluster(t, 3, withRoles(roles, 0)) // RoleLease 0: the default
	rr := newRoleRuns()
	t.Cleanup(rr.close)
	for _, nd := range c.nodes {
		rr.lead(t, nd, roles)
	}
	waitLive(t, c, rr, roles, "at start")
	for round := range 3 {
		ld := leaderServing(t, c)
		pastBound(t, ld)
		waitLive(t, c, rr, roles, fmt.Sprintf("round %d, before the crash", round))
		t.Logf("round %d: crashing leader %s, which runs %d roles", round, ld.id, len(ld.el.HeldRoles()))
		c.crash(ld)
		waitLive(t, c, rr, roles, fmt.Sprintf("round %d, after %s crashed", round, ld.id))
		c.start(ld)
		rr.lead(t, ld, roles)
		settled(t, c, roles, ids(c)...)
	}
}

// renewWatch wraps a node's transport and counts its role renewals on the
// wire.
type renewWatch struct {
	transport.Transport
	inflight *atomic.Int32
}

func (w renewWatch) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if args.Term == 0 {
		w.inflight.Add(1)
		defer w.inflight.Add(-1)
	}
	return w.Transport.RequestPreVote(id, target, args, resp)
}

// TestRolesLeadRoleEndsAtLapse: a holder whose renewals hang on the wire
// (its outbound RPCs delayed far beyond its hold) sees its LeadRole
// contexts end when its lease lapses — while the renewal is still in
// flight, not when it comes back — and, once renewals pass again, runs its
// functions again under the same grants (nobody else may take them: every
// other member is NoRoles). Seen failing with the lapse noticed only by the
// renewal loop after its RPC returned, and with one run per grant.
func TestRolesLeadRoleEndsAtLapse(t *testing.T) {
	roles := roleNames(4)
	const worker = "n3"
	var inflight atomic.Int32
	lease := 10 * testHT
	c, _ := newRoleCluster(t, 3, func(nd *node, cfg *Config) {
		withRoles(roles, lease)(nd, cfg)
		cfg.NoRoles = nd.id != worker
		if nd.id == worker {
			cfg.Transport = renewWatch{Transport: cfg.Transport, inflight: &inflight}
		}
	})
	w := c.byID(worker)
	rr := newRoleRuns()
	var endsMu sync.Mutex
	var ends []string // roles whose context ended with no renewal on the wire
	rr.onEnd = func(id, r string, _ epoch.Epoch) {
		if id == worker && inflight.Load() == 0 {
			endsMu.Lock()
			ends = append(ends, r)
			endsMu.Unlock()
		}
	}
	t.Cleanup(rr.close)
	rr.lead(t, w, roles)
	for {
		waitLive(t, c, rr, roles, "at start")
		ld := leaderServing(t, c)
		if ld != w {
			break
		}
		if err := w.el.Resign(context.Background()); err != nil {
			t.Logf("Resign(%s): %v", worker, err)
		}
	}
	before := w.el.RoleGrants()
	rr.mu.Lock()
	starts := rr.starts[roles[0]]
	rr.mu.Unlock()
	// A renewal sent from now on arrives after 2 s, long after the lease
	// (at most 8/10 of 500 ms from the last granted send) lapsed.
	w.net.Delay(2 * time.Second)
	waitFor(t, "every LeadRole context on "+worker+" to end", func() bool {
		rr.mu.Lock()
		defer rr.mu.Unlock()
		for _, r := range roles {
			if len(rr.running[r]) != 0 {
				return false
			}
		}
		return true
	})
	endsMu.Lock()
	if len(ends) != 0 {
		t.Errorf("LeadRole contexts of %v ended only after the renewal came back: not at the lease's lapse", ends)
	}
	endsMu.Unlock()
	w.net.Delay(0)
	waitLive(t, c, rr, roles, "after renewals pass again")
	after := w.el.RoleGrants()
	for _, r := range roles {
		if after[r] != before[r] {
			t.Logf("role %s: grant %v -> %v (a leader change)", r, before[r], after[r])
		}
	}
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.starts[roles[0]] <= starts {
		t.Errorf("role %s: LeadRole ran no new call after the lease came back", roles[0])
	}
}
