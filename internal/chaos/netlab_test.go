package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/termfence/termfence/internal/netlab"
	"github.com/termfence/termfence/internal/netlab/netlabtest"

	"github.com/termfence/termfence/internal/testwait"
)

// netlabConfig is the netlab mode's short run: 3 nodes, the store and the
// clients each on a lab host, 12 faults (seconds). TERMFENCE_CHAOS_NETLAB=10m
// runs the long mode (5 nodes, that long), as TERMFENCE_CHAOS does on
// loopback.
func netlabConfig(t *testing.T) Config {
	t.Helper()
	netlabtest.Require(t)
	cfg := shortConfig(t)
	cfg.Netlab, cfg.Faults = true, 12
	if s := os.Getenv("TERMFENCE_CHAOS_NETLAB"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("TERMFENCE_CHAOS_NETLAB=%q: %v", s, err)
		}
		cfg.Nodes, cfg.Heartbeat, cfg.Duration, cfg.Faults = 5, 200*time.Millisecond, d, 30
		cfg.Writers, cfg.Resources, cfg.Think, cfg.ReadEvery = 8, 8, 40*time.Millisecond, 60*time.Millisecond
		cfg.CheckTimeout = 20 * time.Minute
	}
	return cfg
}

// TestChaosNetlab is TestChaos with every process on a lab host of its own
// and the kernel making the partitions: links down, and links cut both
// ways or one way, silently, refusing, unreachable or prohibited, between
// nodes and between a node and the store; SIGSTOP and SIGKILL as on
// loopback. The same checker, the same final line.
func TestChaosNetlab(t *testing.T) {
	cfg := netlabConfig(t)
	root, err := ModuleRoot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cfg.FailureDir = filepath.Join(root, "failures")
	res := runChaos(t, cfg)
	if res.Faults < cfg.Faults {
		t.Errorf("only %d faults injected, want >= %d", res.Faults, cfg.Faults)
	}
	if res.Unknown() {
		t.Logf("linearizability: unknown (porcupine ran out of time; not a failure); history in %s", res.FailurePath)
	}
	if !res.Passed() {
		for _, s := range res.LeaderConflicts {
			t.Errorf("leader conflict: %s", s)
		}
		for _, s := range res.ContractBreaks {
			t.Errorf("error contract: %s", s)
		}
		for _, s := range res.Details {
			t.Errorf("%s", s)
		}
		t.Errorf("violation (seed %d): %s, %s", res.Seed, filepath.Join(res.FailurePath, "seed.txt"), filepath.Join(res.FailurePath, "history.html"))
	}
	fmt.Println(res.Line + " (netlab)")
}

// TestChaosNetlabUnfencedControl: the netlab run against a store with the
// fence off must be caught.
func TestChaosNetlabUnfencedControl(t *testing.T) {
	cfg := netlabConfig(t)
	cfg.Unfenced = true
	if os.Getenv("TERMFENCE_CHAOS_NETLAB") == "" {
		// The control needs pauses to show the lost update; more faults
		// make a run without one (or with none that raced) unlikely.
		cfg.Faults = 20
	}
	cfg.FailureDir = t.TempDir()
	if dir := os.Getenv("TERMFENCE_CHAOS_CONTROL_FAILURES"); dir != "" {
		cfg.FailureDir = dir
	}
	cfg.CheckTimeout = 30 * time.Second
	res := runChaos(t, cfg)
	fmt.Println(res.Line + " (netlab, unfenced control)")
	if !res.Violated() {
		t.Fatalf("the unfenced store passed the check in the lab: the suite cannot see what the fence prevents (seed %d)", cfg.Seed)
	}
	t.Logf("violation detected as it should be: stale_accepted=%d lost=%d linearizable=%v", res.StaleAccepted, res.Lost, res.Linearizable)
}

// TestNetlabFaultsCutTheLeader applies each lab fault the nemesis draws to
// the leader of a lab cluster with no load, and requires that the others
// elect a new leader (a higher term) while it holds, and that after the
// heal the cluster has one leader again: the faults really cut the links
// raft uses, in every mode, both ways and one way.
func TestNetlabFaultsCutTheLeader(t *testing.T) {
	netlabtest.Require(t)
	bin, _ := clusterBinary(t)
	cfg := Config{
		Binary: bin, Dir: t.TempDir(), FailureDir: t.TempDir(), Nodes: 3,
		Heartbeat: 150 * time.Millisecond, Faults: 1, Netlab: true, Log: logWriter{t},
	}.withDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := newCluster(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if err := c.startStore(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range c.nodes {
		if err := c.startNode(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	// leader waits for a node other than not to claim a term above above,
	// and returns the claim of the highest term (a deposed leader may
	// still claim its old one for a moment).
	leader := func(what string, not int, above uint64) (int, uint64) {
		t.Helper()
		deadline := time.Now().Add(testwait.Bound(20 * time.Second))
		for time.Now().Before(deadline) {
			best, bestTerm := -1, above
			for i := range c.nodes {
				if i == not {
					continue
				}
				st, err := c.status(ctx, i, 300*time.Millisecond)
				if err != nil {
					continue
				}
				if ep, ok := st.leaderEpoch(); ok && ep.Term > bestTerm {
					best, bestTerm = i, ep.Term
				}
			}
			if best >= 0 {
				return best, bestTerm
			}
			sleepCtx(ctx, 20*time.Millisecond)
		}
		t.Fatalf("%s: no node but %d claimed a term above %d within 20s", what, not, above)
		return -1, 0
	}
	faults := []labFault{{kind: "link-down"}}
	for _, m := range netlab.Modes() {
		faults = append(faults, labFault{kind: "isolate", mode: m})
	}
	for _, m := range netlab.Modes() {
		// Both of the leader's links to the followers cut; then the
		// leader's packets to both blocked, theirs to it not.
		faults = append(faults, labFault{kind: "cut", mode: m}, labFault{kind: "one-way", mode: m})
	}
	for _, f := range faults {
		li, term := leader("before "+f.name(), -1, 0)
		f.from = li
		var err error
		if f.kind == "one-way" || f.kind == "cut" {
			for j := range c.nodes {
				if j != li {
					f.to = j
					err = c.applyLabFault(ctx, f)
					if err != nil {
						break
					}
				}
			}
		} else {
			err = c.applyLabFault(ctx, f)
		}
		if err != nil {
			t.Fatalf("%s: %v", f.name(), err)
		}
		t.Logf("%s: leader %s (term %d) cut: %q", f.name(), c.nodes[li].id, term, c.lab.Faults())
		ni, nterm := leader(f.name(), li, term)
		t.Logf("%s: %s leads in term %d", f.name(), c.nodes[ni].id, nterm)
		if err := c.lab.Heal(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
