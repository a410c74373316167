package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Config describes one chaos run. The zero value of each optional field
// picks the default named in its comment; Validate reports the rest.
type Config struct {
	Binary string // the examples/cluster binary (required)
	// Forge is the internal/cmd/forge binary, the hostile peer; empty: no
	// hostile-peer faults.
	Forge string
	Dir   string // work directory for data dirs, logs and key (required)
	// FailureDir receives the visualization and seed of a failed run
	// (required).
	FailureDir string
	Nodes      int           // 3 or 5 (required)
	Heartbeat  time.Duration // node -heartbeat; also the nemesis's lease (required, >= 20ms)
	Faults     int           // inject at least this many faults (required, > 0)
	Duration   time.Duration // and keep injecting for at least this long
	Seed       int64
	Unfenced   bool // run the store with -unfenced (the control experiment)
	// ReleaseEarly runs the store with -release-early: a fence that admits
	// an epoch and lets go before the write runs (the second control
	// experiment; needs a Middleware backend: bolt, memory, dir, sqlite-do).
	ReleaseEarly bool
	// Backend is the store's -backend (see Backends); "" is "sqlite".
	// "memory" is not durable: the run never restarts the store then.
	// "postgres" needs PostgresDSN.
	Backend string
	// PostgresDSN is the server the postgres backend uses; the run makes
	// a schema of its own there and drops it at the end.
	PostgresDSN string
	// WriteDelay is the store's -write-delay: each fenced write holds the
	// fence a random time below it, so that faults land inside writes.
	// 0: none.
	WriteDelay time.Duration
	// ProxyTimeout is the proxy backends' -proxy-timeout; 0: 1s.
	ProxyTimeout time.Duration
	Writers      int // concurrent writing clients; 0: 6
	Resources    int // fenced resources written; 0: 4
	// Think is the upper bound of a writer's random pause between writes;
	// 0: 4ms.
	Think     time.Duration
	ReadEvery time.Duration // per-resource read interval; 0: 15ms
	PollEvery time.Duration // per-node status poll interval; 0: 20ms
	// WriteTimeout is a client's timeout per request; 0: 5 x Heartbeat +
	// 2s, longer than any pause, so writes held by a paused leader get
	// their answer.
	WriteTimeout time.Duration
	CheckTimeout time.Duration // porcupine's budget; 0: none
	Log          io.Writer     // progress lines; nil: discarded
	// Netlab runs every process on a host of its own in an
	// internal/netlab lab (Linux, root): the nodes n1..nN, the store and
	// the harness's clients each get a network namespace, and partitions
	// are the kernel's (links down, blackhole/unreachable/prohibit routes,
	// refused connections) instead of the nodes' POST /fault.
	Netlab bool
	// PowerLoss puts each node's data directory and the store's data on a
	// powerfs disk of its own (needs root and /dev/fuse) and adds the
	// power-cut faults (power.go).
	PowerLoss bool
	// Roles, if positive, gives the election group that many named roles
	// (node -roles job-01,...): writers write each role's resource
	// (role/NAME) through its owner's POST /role-write, with the role's
	// token, and the checker judges each role on its own (roles.go).
	Roles int
	// RoleWriters is the number of role-writing clients; 0: 4.
	RoleWriters int
	// RecoveryBound is how long full service may take to come back after
	// a fault ends (recovery.go); 0: derived from Heartbeat, PollEvery,
	// WriteDelay and Roles, and scaled for the machine's load.
	RecoveryBound time.Duration
	// StallAfterHeal runs the nodes with -stall-after-heal: after a
	// partition heals they withhold their epochs for good (a planted
	// liveness bug; the liveness control experiment).
	StallAfterHeal bool
	// OnlyFaults, if set, restricts the nemesis to these fault kinds (by
	// name: "partition", "pause-leader", ...); the others are never drawn.
	OnlyFaults []string
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case c.Binary == "":
		return errors.New("chaos: Config.Binary is required")
	case c.Dir == "":
		return errors.New("chaos: Config.Dir is required")
	case c.FailureDir == "":
		return errors.New("chaos: Config.FailureDir is required")
	case c.Nodes != 3 && c.Nodes != 5:
		return fmt.Errorf("chaos: Config.Nodes is %d, want 3 or 5", c.Nodes)
	case c.Heartbeat < 20*time.Millisecond:
		return fmt.Errorf("chaos: Config.Heartbeat %v is below 20ms", c.Heartbeat)
	case c.Faults <= 0:
		return errors.New("chaos: Config.Faults must be positive")
	case c.Duration < 0, c.Writers < 0, c.Resources < 0, c.Think < 0, c.ReadEvery < 0,
		c.PollEvery < 0, c.WriteTimeout < 0, c.CheckTimeout < 0:
		return errors.New("chaos: negative Config field")
	case c.Backend != "" && !slices.Contains(Backends, c.Backend):
		return fmt.Errorf("chaos: Config.Backend %q, want one of %v", c.Backend, Backends)
	case c.Backend == "postgres" && c.PostgresDSN == "":
		return errors.New("chaos: the postgres backend needs Config.PostgresDSN")
	case c.WriteDelay < 0 || c.ProxyTimeout < 0 || c.Roles < 0 || c.RoleWriters < 0 || c.RecoveryBound < 0:
		return errors.New("chaos: negative Config field")
	case c.StallAfterHeal && c.Netlab:
		return errors.New("chaos: Config.StallAfterHeal needs the nodes' POST /fault, which netlab mode does not use")
	}
	for _, k := range c.OnlyFaults {
		if !slices.Contains(faultNames[:], k) {
			return fmt.Errorf("chaos: Config.OnlyFaults: unknown fault kind %q, want some of %v", k, faultNames)
		}
	}
	return nil
}

// Backends are the store backends a run can use (examples/cluster store
// -backend): the SQLite and PostgreSQL transaction paths, Middleware over
// each in-process fence and over sqlfence's Do, and the proxy over sqlfence
// and dirfence.
var Backends = []string{"sqlite", "bolt", "memory", "dir", "sqlite-do", "postgres", "proxy-sqlite", "proxy-dir"}

// durable reports whether the backend keeps its fence across a store
// restart.
func (c Config) durable() bool { return c.Backend != "memory" }

// proxied reports whether the store's writes go through httpfence's proxy.
func (c Config) proxied() bool { return strings.HasPrefix(c.Backend, "proxy-") }

// withDefaults returns a copy of c with defaults filled in.
func (c Config) withDefaults() Config {
	if c.Backend == "" {
		c.Backend = "sqlite"
	}
	if c.ProxyTimeout == 0 {
		c.ProxyTimeout = time.Second
	}
	if c.Writers == 0 {
		c.Writers = 6
	}
	if c.Resources == 0 {
		c.Resources = 4
	}
	if c.Think == 0 {
		c.Think = 4 * time.Millisecond
	}
	if c.ReadEvery == 0 {
		c.ReadEvery = 15 * time.Millisecond
	}
	if c.PollEvery == 0 {
		c.PollEvery = 20 * time.Millisecond
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 5*c.Heartbeat + 2*time.Second
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c
}

func (c Config) resource(i int) string {
	if i == 0 {
		return "register"
	}
	return fmt.Sprintf("register-%d", i)
}

// Result is the outcome of a run.
type Result struct {
	Report
	Seed   int64
	Faults int
	// FaultCounts counts injected faults by kind.
	FaultCounts map[string]int
	// Line is the one-line summary.
	Line string
	// Roles is the per-role verdict of a run with Config.Roles (its
	// violations are also counted in Report).
	Roles RolesReport
	// FailurePath is the directory holding the visualization and the seed
	// when the report is not OK; empty otherwise.
	FailurePath string
}

// Run starts the cluster, runs the workload under the nemesis, checks the
// history and returns the verdict. Every process it started is reaped
// before it returns, whatever happened. The error reports a harness
// failure (a process would not start, say), not a violation: violations
// are in the Result.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	cfg = cfg.withDefaults()
	logf := func(format string, args ...any) { fmt.Fprintf(cfg.Log, format+"\n", args...) }
	res := Result{Seed: cfg.Seed}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return res, fmt.Errorf("chaos: %w", err)
	}
	if cfg.Backend == "postgres" {
		dsn, drop, err := postgresSchema(ctx, cfg.PostgresDSN, cfg.Seed)
		if err != nil {
			return res, err
		}
		defer drop()
		cfg.PostgresDSN = dsn
	}
	c, err := newCluster(ctx, cfg)
	if err != nil {
		return res, err
	}
	defer c.close()

	rec := NewRecorder()
	w := newWorkload(c, rec, cfg)
	rng := rand.New(rand.NewSource(cfg.Seed))
	nem := &nemesis{c: c, w: w, cfg: cfg, rng: rand.New(rand.NewSource(rng.Int63())), logf: logf, labCounts: map[string]int{}}
	nem.logf = nem.noting(logf) // recovery.go: a late recovery names the fault as logged

	logf("chaos: seed=%d nodes=%d heartbeat=%v unfenced=%t release_early=%t backend=%s write_delay=%v netlab=%t dir=%s", cfg.Seed, cfg.Nodes, cfg.Heartbeat, cfg.Unfenced, cfg.ReleaseEarly, cfg.Backend, cfg.WriteDelay, cfg.Netlab, cfg.Dir)
	if c.lab != nil {
		for _, h := range c.lab.Hosts() {
			logf("chaos: netlab %s: %s", c.lab.Name(), h)
		}
	}
	if err := c.startStore(ctx); err != nil {
		return res, err
	}
	var startErr error
	var startMu sync.Mutex
	var wg sync.WaitGroup
	for i := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.startNode(ctx, i); err != nil {
				startMu.Lock()
				startErr = errors.Join(startErr, err)
				startMu.Unlock()
			}
		}()
	}
	wg.Wait()
	if startErr != nil {
		return res, startErr
	}
	if _, err := nem.waitLeader(ctx, 30*time.Second); err != nil {
		return res, fmt.Errorf("chaos: no leader after start: %w", err)
	}

	// Load: pollers, readers, writers.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var load sync.WaitGroup
	for i := range c.nodes {
		load.Add(1)
		go func() { defer load.Done(); w.poll(loadCtx, i) }()
	}
	for r := 0; r < cfg.Resources; r++ {
		load.Add(1)
		go func() { defer load.Done(); w.readerLoop(loadCtx, cfg.Writers+cfg.Resources+r, cfg.resource(r)) }()
	}
	for cl := 0; cl < cfg.Writers; cl++ {
		crng := rand.New(rand.NewSource(rng.Int63()))
		load.Add(1)
		go func() { defer load.Done(); w.writer(loadCtx, cl, crng) }()
	}
	w.startRoles(loadCtx, &load, rng) // roles.go
	stop := func() { stopLoad(); load.Wait(); w.inflight.Wait() }

	nemErr := nem.run(ctx)
	res.Faults = nem.faults
	res.FaultCounts = map[string]int{}
	for k, n := range nem.counts {
		res.FaultCounts[faultKind(k).String()] = n
	}
	for k, n := range nem.labCounts {
		res.FaultCounts[k] = n
	}
	if nemErr != nil {
		stop()
		return res, nemErr
	}

	// Recovery: every node up and healed, a leader, some calm load.
	for i, nd := range c.nodes {
		if !nd.proc.running() {
			if err := c.startNode(ctx, i); err != nil {
				stop()
				return res, err
			}
		}
	}
	if err := nem.healAll(ctx); err != nil {
		stop()
		return res, err
	}
	if nem.late {
		logf("service did not come back after the last fault: no wait for a leader")
	} else if _, err := nem.waitLeader(ctx, 40*cfg.Heartbeat); err != nil {
		logf("no leader after the faults: %v", err)
	}
	sleepCtx(ctx, 10*cfg.Heartbeat)
	stop()

	// Durability of acknowledged writes across one more store crash (not
	// for the memory fence, which forgets everything by design).
	if cfg.durable() {
		from := rec.Now()
		c.store.kill()
		c.noteStoreDead(rec.Now(), rec.Now())
		if err := c.startStore(ctx); err != nil {
			return res, err
		}
		c.noteStoreDown(from, rec.Now())
	} else {
		logf("backend %s is not durable: the store is never restarted in this run", cfg.Backend)
	}
	final := map[string]FinalState{}
	highest, err := c.storeHighest(ctx)
	if err != nil {
		return res, err
	}
	for r := 0; r < cfg.Resources; r++ {
		name := cfg.resource(r)
		op := w.read(ctx, -1, name)
		op.Client = cfg.Writers + cfg.Resources + r
		if op.Outcome == ReadFailed {
			return res, fmt.Errorf("chaos: final read of %s: %s", name, op.Detail)
		}
		rec.Add(op)
		final[name] = FinalState{Found: op.Outcome == ReadValue, Value: op.Value, Term: op.Term, Leader: op.Leader, Highest: highest[name]}
	}
	if err := w.finalRoles(ctx, final, highest); err != nil { // roles.go
		return res, err
	}
	c.close()

	// A node may stamp a write as late as the longest pause after its
	// client gave up.
	h := rec.History(final, 5*cfg.Heartbeat+time.Second)
	for i := range h.Ops {
		op := &h.Ops[i]
		// A node's 5xx while no store process existed: nothing applied.
		if op.Kind == Write && op.Status >= 500 && op.Outcome == Indeterminate && c.storeDeadThroughout(op.Call, op.Return) {
			op.Outcome = StoreDead
			continue
		}
		// A 5xx while the store was up is the store (or node) failing a
		// write it should have answered.
		// In netlab mode a 5xx from a node cut off from the store is
		// the cut.
		if op.Kind == Write && op.Status >= 500 && op.Outcome == Indeterminate && op.Contract == "" && !op.Cut &&
			!c.storeDownDuring(op.Call, op.Return, 5*cfg.Heartbeat) &&
			!c.storeCutDuring(c.indexOf(op.Node), op.Call, op.Return, 5*cfg.Heartbeat) {
			op.Contract = fmt.Sprintf("%d while the store was up: %s", op.Status, op.Detail)
		}
	}
	checkStart := time.Now()
	h, roleHists := splitRoles(h, w) // roles.go
	res.Report = Check(h, cfg.CheckTimeout)
	res.Roles = checkRoles(roleHists, cfg.CheckTimeout)
	res.Report.foldRoles(res.Roles)
	res.Report.HostileAccepted = nem.hostileAccepted
	res.Report.Recovery = nem.live // recovery.go
	logf("check took %v; highest term seen %d", time.Since(checkStart).Round(time.Millisecond), res.Report.MaxTerm)
	res.Line = res.Report.Line(cfg.Seed, res.Faults)
	if !res.Report.OK() {
		res.FailurePath, err = writeFailure(cfg, res, h)
		if err != nil {
			logf("writing the failure: %v", err)
		}
		logf("violation: seed and details in %s, visualization in %s, history in %s, process logs in %s",
			filepath.Join(res.FailurePath, "seed.txt"), filepath.Join(res.FailurePath, "history.html"),
			filepath.Join(res.FailurePath, "history.json"), filepath.Join(res.FailurePath, "logs"))
	}
	return res, nil
}

// storeHighest reads the store's GET /status "highest" map as terms.
func (c *cluster) storeHighest(ctx context.Context) (map[string]uint64, error) {
	st, b, err := c.do(ctx, "GET", c.storeURL+"/status", nil, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("chaos: store status: %w", err)
	}
	if st != 200 {
		return nil, fmt.Errorf("chaos: store status: %d %s", st, b)
	}
	return parseStoreHighest(b)
}

// writeFailure saves what a failed run needs for replay and diagnosis.
func writeFailure(cfg Config, res Result, h History) (string, error) {
	dir := filepath.Join(cfg.FailureDir, fmt.Sprintf("chaos-%d-%s", cfg.Seed, time.Now().Format("20060102-150405")))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("chaos: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\nreplay: TERMFENCE_CHAOS_SEED=%d\nnodes=%d heartbeat=%v unfenced=%t backend=%s netlab=%t faults=%v\nlogs: %s\n\n",
		res.Line, cfg.Seed, cfg.Nodes, cfg.Heartbeat, cfg.Unfenced, cfg.Backend, cfg.Netlab, res.FaultCounts, cfg.Dir)
	for _, s := range res.LeaderConflicts {
		fmt.Fprintf(&b, "leader conflict: %s\n", s)
	}
	for _, s := range res.ContractBreaks {
		fmt.Fprintf(&b, "contract: %s\n", s)
	}
	for _, s := range res.Details {
		fmt.Fprintf(&b, "%s\n", s)
	}
	for _, s := range res.HostileAccepted {
		fmt.Fprintf(&b, "hostile peer: accepted %s\n", s)
	}
	for _, s := range res.Recovery.Errors() {
		fmt.Fprintf(&b, "%s\n", s)
	}
	if res.MaxTerm > SaneTerm {
		fmt.Fprintf(&b, "term %d seen, above %d\n", res.MaxTerm, uint64(SaneTerm))
	}
	if err := os.WriteFile(filepath.Join(dir, "seed.txt"), []byte(b.String()), 0o644); err != nil {
		return dir, fmt.Errorf("chaos: %w", err)
	}
	if b, err := json.Marshal(h); err == nil {
		_ = os.WriteFile(filepath.Join(dir, "history.json"), b, 0o644)
	}
	if err := res.Report.Visualize(filepath.Join(dir, "history.html")); err != nil {
		return dir, err
	}
	// The processes' logs live in the test's temporary directory, which
	// is removed when the test ends: keep a copy with the failure.
	if err := copyLogs(cfg.Dir, filepath.Join(dir, "logs")); err != nil {
		return dir, err
	}
	return dir, nil
}

// copyLogs copies the *.log files of dir (the nodes', the store's, the
// clients') into to.
func copyLogs(dir, to string) error {
	logs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil || len(logs) == 0 {
		return err
	}
	if err := os.MkdirAll(to, 0o755); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
		if err := os.WriteFile(filepath.Join(to, filepath.Base(l)), b, 0o644); err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
	}
	return nil
}
