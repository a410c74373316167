package election

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/termfence/termfence/internal/testwait"
)

// TestRolesRandomLiveness is the roles' randomized harness: each step
// injects a fault — the leader or a follower crashed and restarted, a node
// cut off, a node's outbound RPCs delayed beyond its hold (a slow or paused
// node), a voter removed from the group and added back, or an admin call
// (MoveRole, RemoveRoles then AddRoles) under a context with a random
// deadline or already cancelled — then ends every fault and checks the
// liveness oracle (docs/DESIGN.md, "Liveness"): within B plus a few
// election timeouts (scaled for the machine's load: a bound, not a
// measurement) every role has exactly one live owner whose LeadRole
// function runs and which holds it under that epoch. The role checker's
// safety oracles (no two holders at once, grants rising, one node per
// grant) run throughout and judge at cleanup. Every node runs LeadRole for
// every role, with the default RoleLease. The seed is logged:
// TERMFENCE_ROLES_SEED replays a run; TERMFENCE_ROLES_STEPS sets its
// length (default 4: a few seconds; docs/TESTING.md has a long run).
func TestRolesRandomLiveness(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("TERMFENCE_ROLES_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("TERMFENCE_ROLES_SEED=%q: %v", v, err)
		}
		seed = s
	}
	steps := 4
	if v := os.Getenv("TERMFENCE_ROLES_STEPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("TERMFENCE_ROLES_STEPS=%q: want a positive number", v)
		}
		steps = n
	}
	t.Logf("seed %d (TERMFENCE_ROLES_SEED), %d steps", seed, steps)
	rng := rand.New(rand.NewPCG(seed, 0))
	roles := roleNames(8)
	c, rc := newRoleCluster(t, 3, withRoles(roles, 0))
	rr := newRoleRuns()
	t.Cleanup(rr.close)
	for _, nd := range c.nodes {
		rr.lead(t, nd, roles)
	}
	bound := roleLeaseDefault(c.ht) + 10*c.et
	oracle := testwait.Bound(bound)
	waitLive(t, c, rr, roles, "at start")
	ctx := context.Background()
	var worst time.Duration
	counts := map[string]int{}
	pick := func(leader bool) *node {
		var ns []*node
		for _, nd := range c.nodes {
			if !nd.up {
				continue
			}
			if isLd := servingLeader(c) == nd; isLd == leader {
				ns = append(ns, nd)
			}
		}
		if len(ns) == 0 {
			return nil
		}
		return ns[rng.IntN(len(ns))]
	}
	adminCtx := func() (context.Context, context.CancelFunc) {
		switch rng.IntN(3) {
		case 0:
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			return cctx, cancel
		case 1:
			return context.WithTimeout(ctx, time.Duration(rng.IntN(20))*time.Millisecond)
		}
		return context.WithTimeout(ctx, waitLong)
	}
	for step := range steps {
		ops := []string{"crash-leader", "crash-follower", "isolate", "slow", "member", "move", "readd"}
		op := ops[rng.IntN(len(ops))]
		counts[op]++
		t.Logf("step %d: %s", step, op)
		switch op {
		case "crash-leader", "crash-follower":
			nd := pick(op == "crash-leader")
			if nd == nil {
				break
			}
			c.crash(nd)
			c.start(nd)
			rc.track(nd)
			rr.lead(t, nd, roles)
		case "isolate":
			nd := c.nodes[rng.IntN(len(c.nodes))]
			nd.net.Isolate()
			waitFor(t, "the others to notice", func() bool { return !nd.el.roles.leaseHolds() })
			nd.net.Heal()
		case "slow":
			nd := c.nodes[rng.IntN(len(c.nodes))]
			nd.net.Delay(roleLeaseDefault(c.ht))
			waitFor(t, nd.id+"'s lease to lapse", func() bool { return !nd.el.roles.leaseHolds() })
			nd.net.Delay(0)
		case "member":
			nd := pick(false)
			if nd == nil {
				break
			}
			onServingLeader(t, c, "RemoveServer "+nd.id, func(ld *node) error {
				err := ld.el.RemoveServer(ctx, nd.id)
				if errors.Is(err, ErrUnknownServer) {
					return nil
				}
				return err
			})
			waitFor(t, nd.id+" to give up its roles", func() bool { return len(nd.el.HeldRoles()) == 0 })
			c.stop(nd)
			nd.dir = t.TempDir() // back under a wiped data dir: as a new server of the same ID is not allowed, a new ID
			nd.id = fmt.Sprintf("%s-%d", nd.id[:2], step)
			nd.join = true
			c.start(nd)
			rc.track(nd)
			rr.lead(t, nd, roles)
			onServingLeader(t, c, "AddVoter "+nd.id, func(ld *node) error { return ld.el.AddVoter(ctx, nd.id, nd.id) })
		case "move", "readd":
			r := roles[rng.IntN(len(roles))]
			actx, cancel := adminCtx()
			ld := servingLeader(c)
			if ld == nil {
				cancel()
				break
			}
			var err error
			if op == "move" {
				to := c.nodes[rng.IntN(len(c.nodes))].id
				err = ld.el.MoveRole(actx, r, to)
			} else if err = ld.el.RemoveRoles(actx, r); err == nil {
				err = ld.el.AddRoles(actx, r)
			}
			cancel()
			t.Logf("  %s of %s: %v", op, r, err)
			// A removal whose add was cut short leaves r out of the
			// table: add it back, as an operator would.
			onServingLeader(t, c, "AddRoles "+r, func(ld *node) error { return ld.el.AddRoles(ctx, r) })
		}
		// Every fault has ended: full liveness within the bound.
		start := time.Now()
		var why string
		if !pollUntil(start.Add(oracle), func() bool {
			ok, w := rr.live(c, roles)
			why = w
			return ok
		}) {
			t.Fatalf("step %d (%s, seed %d): no full liveness %v after the faults ended (bound %v, scaled for load to %v): %s", step, op, seed, time.Since(start), bound, oracle, why)
		}
		took := time.Since(start)
		worst = max(worst, took)
		t.Logf("  full liveness %v after the faults ended", took)
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var summary []string
	for _, k := range keys {
		summary = append(summary, fmt.Sprintf("%s %d", k, counts[k]))
	}
	t.Logf("seed %d: %d steps (%v); worst time to full liveness after faults ended %v (bound %v)", seed, steps, summary, worst, bound)
}
