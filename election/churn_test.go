package election

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestMembershipChurnRandom: a random sequence of removals (of followers,
// and of the leader itself), additions back and handovers, while barriers
// keep the leader's replication busy. Oracles after every step: each
// removed node knows it (Removed) and is in no configuration the leader
// holds; a node added back no longer reports Removed and follows a
// leader; and the checker's invariants hold throughout (verified at
// cleanup). A node is added back while a leader it knows leads (handed
// over to first if need be): one that missed the change adding the
// current leader refuses that leader's appends (docs/DESIGN.md). The seed
// is logged: TERMFENCE_CHURN_SEED replays a run, TERMFENCE_CHURN_STEPS
// sets its length (default 16).
func TestMembershipChurnRandom(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("TERMFENCE_CHURN_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("TERMFENCE_CHURN_SEED=%q: %v", v, err)
		}
		seed = s
	}
	steps := 16
	if v := os.Getenv("TERMFENCE_CHURN_STEPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("TERMFENCE_CHURN_STEPS=%q: want a positive number", v)
		}
		steps = n
	}
	t.Logf("seed %d (TERMFENCE_CHURN_SEED), %d steps", seed, steps)
	rng := rand.New(rand.NewPCG(seed, 0))
	ctx := context.Background()
	c := newCluster(t, 5)
	defer keepLeaderBusy(c)()
	removed := map[string]bool{}
	for step := range steps {
		ld, _ := c.leader()
		var members, out []*node
		for _, nd := range c.nodes {
			if removed[nd.id] {
				out = append(out, nd)
			} else {
				members = append(members, nd)
			}
		}
		ops := []string{"resign"}
		if len(members) > 3 {
			ops = append(ops, "remove")
		}
		if len(out) > 0 {
			ops = append(ops, "add")
		}
		switch ops[rng.IntN(len(ops))] {
		case "remove":
			f := members[rng.IntN(len(members))]
			t.Logf("step %d: remove %s (the leader is %s)", step, f.id, ld.id)
			removeOnLeader(t, c, f.id)
			removed[f.id] = true
			waitFor(t, f.id+" to learn it was removed", f.el.Removed)
		case "add":
			f := out[rng.IntN(len(out))]
			if !voterOf(t, f, ld.id) {
				// f refuses appends from a server that is not a voter in
				// the latest configuration it holds, and it missed the
				// change that added ld: hand leadership to a member f
				// knows first (docs/DESIGN.md, "A removed node knows it").
				var to *node
				for _, nd := range members {
					if voterOf(t, f, nd.id) {
						to = nd
						break
					}
				}
				if to == nil {
					t.Logf("step %d: %s knows no current member: it cannot be added back", step, f.id)
					continue
				}
				t.Logf("step %d: %s does not know the leader %s: hand over to %s first", step, f.id, ld.id, to.id)
				onLeader(t, c, "TransferTo("+to.id+")", func(nd *node) error { return nd.el.TransferTo(ctx, to.id) })
				waitFor(t, to.id+" to lead", func() bool { l, _ := c.leader(); return l == to })
			}
			t.Logf("step %d: add %s back", step, f.id)
			onLeader(t, c, "AddVoter("+f.id+")", func(nd *node) error { return nd.el.AddVoter(ctx, f.id, f.id) })
			delete(removed, f.id)
			waitFor(t, f.id+" to be a member following a leader again", func() bool {
				return !f.el.Removed() && f.el.Status().LeaderID != ""
			})
		default:
			t.Logf("step %d: %s resigns", step, ld.id)
			if err := ld.el.Resign(ctx); err != nil {
				t.Fatalf("step %d: Resign on %s: %v", step, ld.id, err)
			}
		}
		ld, _ = c.leader()
		for id := range removed {
			if hasServer(t, ld, id) {
				t.Fatalf("step %d: removed %s is in the configuration of the leader %s", step, id, ld.id)
			}
			if !c.byID(id).el.Removed() {
				t.Fatalf("step %d: removed %s no longer reports Removed", step, id)
			}
		}
	}
}

// voterOf reports whether id is a voter in the latest configuration nd
// holds.
func voterOf(t *testing.T, nd *node, id string) bool {
	t.Helper()
	f := nd.el.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatalf("GetConfiguration on %s: %v", nd.id, err)
	}
	s, ok := find(f.Configuration(), raft.ServerID(id))
	return ok && s.Suffrage == raft.Voter
}

// keepLeaderBusy appends barriers on whichever node of c leads until the
// returned stop is called.
func keepLeaderBusy(c *cluster) (stop func()) {
	return keepReplicating(func() *Election {
		for _, nd := range c.nodes {
			if nd.el.raft.State() == raft.Leader {
				return nd.el
			}
		}
		return nil
	}, c.ht)
}
