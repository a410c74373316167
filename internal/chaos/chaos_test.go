package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/termfence/termfence/internal/skiptest"
)

var (
	buildOnce  sync.Once
	buildDir   string
	buildBin   string
	buildForge string
	buildErr   error
)

// clusterBinary builds ./examples/cluster and ./internal/cmd/forge once
// per test binary and returns both, or uses the cluster binary
// TERMFENCE_CHAOS_BIN names (and builds forge).
func clusterBinary(t *testing.T) (cluster, forge string) {
	t.Helper()
	buildOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		root, err := ModuleRoot(ctx)
		if err != nil {
			buildErr = err
			return
		}
		if buildDir, err = os.MkdirTemp("", "termfence-chaos-bin-"); err != nil {
			buildErr = err
			return
		}
		buildForge = filepath.Join(buildDir, "forge")
		if buildErr = BuildForge(ctx, root, buildForge); buildErr != nil {
			return
		}
		if buildBin = os.Getenv("TERMFENCE_CHAOS_BIN"); buildBin != "" {
			return
		}
		buildBin = filepath.Join(buildDir, "cluster")
		buildErr = Build(ctx, root, buildBin)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin, buildForge
}

// seed is TERMFENCE_CHAOS_SEED, or derived from the clock.
func seed(t *testing.T) int64 {
	t.Helper()
	if s := os.Getenv("TERMFENCE_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("TERMFENCE_CHAOS_SEED=%q: %v", s, err)
		}
		return v
	}
	return time.Now().UnixNano()
}

// logWriter sends progress lines to t.Log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}

// shortConfig is the CI mode: 3 nodes, short raft timeouts, 30 faults.
func shortConfig(t *testing.T) Config {
	bin, forge := clusterBinary(t)
	return Config{
		Binary: bin, Forge: forge, Dir: t.TempDir(), Nodes: 3, Heartbeat: 150 * time.Millisecond,
		Faults: 30, Seed: seed(t), CheckTimeout: 2 * time.Minute, Log: logWriter{t},
	}
}

func runChaos(t *testing.T, cfg Config) Result {
	t.Helper()
	t.Logf("chaos: seed=%d (replay with TERMFENCE_CHAOS_SEED=%d)", cfg.Seed, cfg.Seed)
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("chaos run (seed %d): %v", cfg.Seed, err)
	}
	t.Logf("faults by kind: %v", res.FaultCounts)
	t.Log(res.Recovery.Line())
	if !cfg.StallAfterHeal { // the liveness control expects its late recovery
		for _, s := range res.Recovery.Errors() {
			t.Errorf("%s (seed %d)", s, cfg.Seed)
		}
	}
	return res
}

// TestChaos runs the nemesis against the fenced store and checks the
// history. TERMFENCE_CHAOS=10m runs the long mode (5 nodes, that long).
func TestChaos(t *testing.T) {
	cfg := shortConfig(t)
	root, err := ModuleRoot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cfg.FailureDir = filepath.Join(root, "failures")
	if s := os.Getenv("TERMFENCE_CHAOS"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("TERMFENCE_CHAOS=%q: %v", s, err)
		}
		cfg.Nodes, cfg.Heartbeat, cfg.Duration = 5, 200*time.Millisecond, d
		// Fewer operations per second and more resources: porcupine's
		// memory grows with the square of a partition's length.
		cfg.Writers, cfg.Resources, cfg.Think, cfg.ReadEvery = 8, 8, 40*time.Millisecond, 60*time.Millisecond
		cfg.CheckTimeout = 20 * time.Minute
	}
	res := runChaos(t, cfg)
	if res.Faults < 30 {
		t.Errorf("only %d faults injected, want >= 30", res.Faults)
	}
	for _, k := range []string{"hostile-peer", "refused-link"} {
		if res.FaultCounts[k] == 0 {
			t.Errorf("no %s fault was injected", k)
		}
	}
	t.Logf("highest term seen: %d", res.MaxTerm)
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
		for _, s := range res.HostileAccepted {
			t.Errorf("hostile peer: accepted %s", s)
		}
		if res.MaxTerm > SaneTerm {
			t.Errorf("a node reached term %d, above %d: a message moved the term", res.MaxTerm, SaneTerm)
		}
		t.Errorf("violation (seed %d): %s, %s", res.Seed, filepath.Join(res.FailurePath, "seed.txt"), filepath.Join(res.FailurePath, "history.html"))
	}
	fmt.Println(res.Line)
}

// TestChaosUnfencedControl runs the same nemesis against a store with the
// fence switched off: the checker must see the paused leaders' late writes
// land over their successors'. If this passes the fenced run means
// something.
func TestChaosUnfencedControl(t *testing.T) {
	cfg := shortConfig(t)
	cfg.Unfenced = true
	cfg.FailureDir = t.TempDir()
	if dir := os.Getenv("TERMFENCE_CHAOS_CONTROL_FAILURES"); dir != "" {
		cfg.FailureDir = dir // keep the control's (expected) failure report
	}
	// Proving a violated history not linearizable is porcupine's
	// exhaustive case; stale_accepted already shows the violation, so
	// porcupine gets a shorter budget here.
	cfg.CheckTimeout = 30 * time.Second
	res := runChaos(t, cfg)
	fmt.Println(res.Line + " (unfenced control)")
	if !res.Violated() {
		t.Fatalf("the unfenced store passed the check: the suite cannot see what the fence prevents (seed %d)", cfg.Seed)
	}
	if res.FailurePath == "" {
		t.Errorf("no failure report was written for the violation")
	}
	t.Logf("violation detected as it should be: stale_accepted=%d lost=%d linearizable=%v", res.StaleAccepted, res.Lost, res.Linearizable)
}

// backendConfig is the short run of one store backend: fewer faults than
// TestChaos, writes held in the fence up to 20 ms so that disconnects and
// session kills land inside them, and a 1.5 s proxy timeout (with 600 ms,
// a record service's bbolt commit on a loaded CI machine overstayed it
// now and then: a 504 while the store was up, the proxy doing its job).
func backendConfig(t *testing.T, backend string) Config {
	cfg := shortConfig(t)
	cfg.Backend, cfg.Faults = backend, 8
	cfg.WriteDelay, cfg.ProxyTimeout = 20*time.Millisecond, 1500*time.Millisecond
	if s := os.Getenv("TERMFENCE_CHAOS"); s != "" {
		cfg.Faults = 40
	}
	root, err := ModuleRoot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cfg.FailureDir = filepath.Join(root, "failures")
	return cfg
}

// BackendsEnv picks the backends TestChaosBackends runs: "all" (also the
// default of the long mode, TERMFENCE_CHAOS), or a comma-separated list of
// Backends. Unset: defaultBackends.
const BackendsEnv = "TERMFENCE_CHAOS_BACKENDS"

// defaultBackends is the short mode's subset, one of each path the issue
// names, so that the CI run stays a few minutes on 2 cores: sqlfence's Do
// through httpfence.Middleware (a client that disconnects mid-write), the
// proxy over sqlfence (trickled bodies), and PostgreSQL (sessions killed
// mid-write; skipped without TERMFENCE_POSTGRES_DSN). TestChaos runs
// sqlite, TestChaosReleaseEarlyControl bolt. TERMFENCE_CHAOS_BACKENDS=all
// adds bolt, memory, dir and proxy-dir (about 9 s each here).
var defaultBackends = []string{"sqlite-do", "proxy-sqlite", "postgres"}

// chaosBackends returns the backends TestChaosBackends runs.
func chaosBackends(t *testing.T) []string {
	t.Helper()
	v := os.Getenv(BackendsEnv)
	if v == "" && os.Getenv("TERMFENCE_CHAOS") != "" {
		v = "all"
	}
	switch v {
	case "":
		return defaultBackends
	case "all":
		return slices.DeleteFunc(slices.Clone(Backends), func(b string) bool { return b == "sqlite" })
	}
	var list []string
	for _, b := range strings.Split(v, ",") {
		if b = strings.TrimSpace(b); !slices.Contains(Backends, b) {
			t.Fatalf("%s=%q: unknown backend %q, want \"all\" or some of %v", BackendsEnv, v, b, Backends)
		}
		list = append(list, b)
	}
	return list
}

// TestChaosBackends runs the nemesis over other store backends: each
// in-process fence and sqlfence's Do through httpfence.Middleware, the
// proxy over sqlfence and dirfence (with clients that trickle their
// bodies), and PostgreSQL (with its sessions killed mid-write; skipped
// without TERMFENCE_POSTGRES_DSN). Every backend also gets clients that
// disconnect mid-write. The memory fence is not durable, so its store is
// never restarted. Each must report stale_accepted=0 lost=0. The short
// mode runs defaultBackends; TERMFENCE_CHAOS_BACKENDS=all runs them all.
func TestChaosBackends(t *testing.T) {
	for _, backend := range chaosBackends(t) {
		t.Run(backend, func(t *testing.T) {
			cfg := backendConfig(t, backend)
			if backend == "postgres" {
				cfg.PostgresDSN = os.Getenv(PostgresEnv)
				if cfg.PostgresDSN == "" {
					skiptest.Skip(t, "PostgreSQL (set "+PostgresEnv+")", "the postgres backend needs a server: set %s", PostgresEnv)
				}
			}
			res := runChaos(t, cfg)
			fmt.Println(res.Line + " (backend " + backend + ")")
			if res.Unknown() {
				t.Logf("linearizability: unknown (porcupine ran out of time; not a failure); history in %s", res.FailurePath)
			}
			if !res.Passed() {
				for _, s := range append(append(res.LeaderConflicts, res.ContractBreaks...), res.Details...) {
					t.Errorf("%s", s)
				}
				t.Errorf("violation on backend %s (seed %d): %s", backend, res.Seed, filepath.Join(res.FailurePath, "seed.txt"))
			}
		})
	}
}

// TestChaosReleaseEarlyControl runs the nemesis against a store whose
// fence admits an epoch and lets go before the write runs (what the old
// SQL fence did when its caller's context ended): the checker must see a
// deposed leader's write land after its successor's.
func TestChaosReleaseEarlyControl(t *testing.T) {
	cfg := backendConfig(t, "bolt")
	cfg.ReleaseEarly, cfg.Faults = true, 12
	// Writes land up to four leases after their admission: long enough
	// that a write admitted just before a leadership change lands after
	// the successor's first writes.
	cfg.WriteDelay = 4 * cfg.Heartbeat
	cfg.FailureDir = t.TempDir()
	cfg.CheckTimeout = 30 * time.Second
	res := runChaos(t, cfg)
	fmt.Println(res.Line + " (release-early control)")
	if !res.Violated() {
		t.Fatalf("a fence that releases early passed the check: the suite cannot see it (seed %d)", cfg.Seed)
	}
	t.Logf("violation detected as it should be: stale_accepted=%d lost=%d linearizable=%v", res.StaleAccepted, res.Lost, res.Linearizable)
}
