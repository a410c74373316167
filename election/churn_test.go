package election

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/internal/testwait"
)

// TestMembershipChurnRandom: a random sequence of removals (of followers,
// and of the leader itself), additions back, handovers, replacements of a
// killed voter by a new node (ReplaceServer), joins of a voter that is not
// running (refused: it stays a non-voter, then goes) and partitions of a
// follower that heal, while barriers keep the leader's replication busy.
// Oracles after every step: each removed node knows it (Removed) and is in
// no configuration the leader holds; a node added back no longer reports
// Removed and follows a leader; liveness: once the step's faults have
// ended, within liveBound, a node holds a confirmed epoch, every live
// member follows it and every removed node knows it (the worst time is
// logged); and the checker's invariants (I1, I2) hold throughout
// (verified at cleanup). A node is added back while a leader it knows leads (handed
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
	defer keepLeaderBusy(c)() // the first five only: see keepLeaderBusy
	var spare []*node         // replacements, started on demand
	for i := range steps {
		nd := &node{c: c, id: fmt.Sprintf("r%d", i+1), dir: t.TempDir(), join: true}
		c.nodes = append(c.nodes, nd)
		spare = append(spare, nd)
	}
	removed := map[string]bool{}
	dead := map[string]bool{}
	var worst time.Duration
	for step := range steps {
		ld, _ := c.leader()
		var members, out []*node
		for _, nd := range c.nodes {
			switch {
			case dead[nd.id] || !nd.up:
			case removed[nd.id]:
				out = append(out, nd)
			default:
				members = append(members, nd)
			}
		}
		var followers []*node
		for _, nd := range members {
			if nd != ld {
				followers = append(followers, nd)
			}
		}
		ops := []string{"resign", "join-down", "partition"}
		if len(members) > 3 {
			ops = append(ops, "remove")
		}
		if len(out) > 0 {
			ops = append(ops, "add")
		}
		if len(spare) > 0 && len(followers) > 0 {
			ops = append(ops, "replace")
		}
		switch ops[rng.IntN(len(ops))] {
		case "replace":
			f, nw := followers[rng.IntN(len(followers))], spare[0]
			spare = spare[1:]
			t.Logf("step %d: kill %s for good and replace it with %s (the leader is %s)", step, f.id, nw.id, ld.id)
			c.crash(f)
			dead[f.id] = true
			c.start(nw)
			replaceOnLeader(t, c, f.id, nw.id)
		case "join-down":
			id := fmt.Sprintf("down%d", step)
			t.Logf("step %d: AddVoter(%s) while %s is not running", step, id, id)
			actx, cancel := context.WithTimeout(ctx, 5*c.ht)
			err := ld.el.AddVoter(actx, id, id)
			cancel()
			if err == nil {
				t.Fatalf("step %d: AddVoter(%s) of a node that is not running succeeded", step, id)
			}
			t.Logf("step %d: AddVoter(%s): %v", step, id, err)
			// Refused as not caught up; or, when the leader is slow or
			// changes, the non-voter's own addition may be in flight or
			// refused: the oracle is that it is never a voter.
			var ce *ChangeError
			if !errors.Is(err, ErrNotCaughtUp) && !errors.Is(err, ErrNotLeader) && !errors.As(err, &ce) {
				t.Fatalf("step %d: AddVoter(%s): %v, want ErrNotCaughtUp (or a change that did not commit)", step, id, err)
			}
			waitFor(t, id+" to go again", func() bool {
				l, _ := c.leader()
				if s, ok := suffrage(t, l, id); ok && s == raft.Voter {
					t.Fatalf("step %d: %s, not running, is a voter", step, id)
				} else if !ok {
					return true
				}
				err := l.el.RemoveServer(context.Background(), id)
				return err == nil || errors.Is(err, ErrUnknownServer)
			})
		case "partition":
			if len(followers) == 0 {
				continue
			}
			f := followers[rng.IntN(len(followers))]
			t.Logf("step %d: partition %s away, then heal", step, f.id)
			f.net.Isolate()
			waitFor(t, f.id+" to lose its leader", func() bool { return f.el.Status().LeaderID == "" })
			f.net.Heal()
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
		// Liveness: the step's faults have ended.
		healed := time.Now()
		waitForUpTo(t, liveBound, fmt.Sprintf("step %d: a leader with a confirmed epoch that every live member follows", step), func() bool {
			l, err := c.leaderNow()
			if err != nil {
				return false
			}
			for _, nd := range c.nodes {
				if !nd.up || dead[nd.id] || removed[nd.id] {
					continue
				}
				if nd.el.Status().LeaderID != l.id {
					return false
				}
			}
			return true
		})
		if d := time.Since(healed); d > worst {
			worst = d
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
	t.Logf("%d steps; worst time from a step's end to a leader every live member follows: %v (bound %v)", steps, worst, liveBound)
}

// liveBound is the liveness oracle's bound: from the end of a step's
// faults to a leader with a confirmed epoch that every live member
// follows. Ten seconds (scaled for the machine's load) against an
// ElectionTimeout of 50 ms: an election takes a few timeouts, a node back
// from a partition follows at the next heartbeat.
var liveBound = testwait.Bound(10 * time.Second)

// leaderNow returns the node that holds a confirmed epoch now, if exactly
// one does.
func (c *cluster) leaderNow() (*node, error) {
	var ld *node
	for _, nd := range c.nodes {
		if !nd.up {
			continue
		}
		if _, err := c.epochOf(nd); err == nil {
			if ld != nil {
				return nil, fmt.Errorf("%s and %s both hold an epoch", ld.id, nd.id)
			}
			ld = nd
		}
	}
	if ld == nil {
		return nil, ErrNoLeader
	}
	return ld, nil
}

// replaceOnLeader replaces the voter old with the running node nw on
// whichever node leads, again while leadership moves under the call (each
// step of ReplaceServer is safe to repeat).
func replaceOnLeader(t *testing.T, c *cluster, old, nw string) {
	t.Helper()
	onLeader(t, c, "ReplaceServer("+old+", "+nw+")", func(ld *node) error {
		ctx, cancel := context.WithTimeout(context.Background(), testwait.Bound(20*time.Second))
		defer cancel()
		err := ld.el.ReplaceServer(ctx, old, Member{ID: nw, Addr: nw})
		var ce *ChangeError
		if errors.As(err, &ce) && ce.State == ChangeInFlight {
			return ErrNotLeader // ask again: done steps are skipped
		}
		return err
	})
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
// returned stop is called. It sees the nodes c has when it is called (and
// their Elections then: a node restarted later is not seen).
func keepLeaderBusy(c *cluster) (stop func()) {
	els := make([]*Election, 0, len(c.nodes))
	for _, nd := range c.nodes {
		els = append(els, nd.el)
	}
	return keepReplicating(func() *Election {
		for _, el := range els {
			if el.raft.State() == raft.Leader {
				return el
			}
		}
		return nil
	}, c.ht)
}
