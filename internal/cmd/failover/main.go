// Command failover measures how long a three-node termfence cluster takes to
// hand out a new confirmed epoch after its leader dies or resigns, side by
// side with raw hashicorp/raft wired the plain way, in the same run.
//
//	go run ./internal/cmd/failover [-n 50] [-ht 100ms] [-llt 50ms]
//	    [-scenarios crash,killed,handover] [-json FILE] [-v] [-net sim|netlab]
//	go run ./internal/cmd/failover -healthy 10m [-ht 50ms]
//
// Both clusters run on loopback TCP (hashicorp/raft's NetworkTransport with
// the settings of transport.NewTCP, over a stream layer that can play a dead
// host) with raft-boltdb stores in a temp dir and the same timeouts
// (ElectionTimeout = HeartbeatTimeout, LeaderLeaseTimeout = HeartbeatTimeout/2
// unless -llt is given). Rounds alternate between the two clusters so both
// see the same machine conditions.
//
// Scenarios, each timed from just before the fault until another node holds
// a confirmed epoch (termfence: its Observe stream reports Leading with a
// higher term) or is Leader (raw: its LeaderCh says true with a higher term):
//
//   - crash: the leader's host is gone. Its connections stay open but go
//     silent and its port answers nothing: peers learn of it only by timing
//     out. Afterwards the node is shut down and restarted on the same data
//     dir and port, and the cluster settles before the next round.
//   - killed: the leader's process dies while its host stays up: raft and
//     the transport shut down with no handover, every connection closes and
//     the port refuses. Restarted as for crash.
//   - handover: termfence's Resign against raw raft's LeadershipTransfer.
//
// For crash and killed the command also reports the Raft terms spent per
// failover (new leader's term minus the old one; 1 is the minimum), and for
// termfence the time from raft's win to the confirmed epoch when it saw both.
//
// -net netlab (Linux, as root) runs the same scenarios with each node a
// process of its own in a host of an internal/netlab lab — six hosts, one
// per node, on a bridge in a namespace of its own — so the faults are the
// kernel's: crash takes the leader's switch port down (its connections go
// silent, its address stops answering; timed from just before the netlink
// request), killed SIGKILLs the leader's process on a live host (the
// kernel closes its connections and refuses its port), handover asks the
// leader's process to Resign / LeadershipTransfer. Nodes use
// transport.NewTCP (termfence) and raft.NewTCPTransport (raw), pool 3,
// timeout 10 s. Each node reports its events on its standard output with
// CLOCK_MONOTONIC times, the clock the parent takes the fault time on. The
// rows are labelled "(netlab)" and carry params net=netlab.
//
// -json FILE writes every distribution in the result-file format of
// docs/PERFORMANCE.md (version 1), from a local struct with the same JSON
// tags: the perf module that defines the format pulls etcd, which the root
// module must not depend on.
//
// -healthy D runs both clusters for D with no fault while one CPU-burning
// process per core competes with them for the CPUs (the kernel shares the
// cores, as with any other busy process on the host), and reports every term
// change: each one is an election nobody asked for. (Burners as goroutines
// would instead take the Go scheduler's processors and starve raft for
// 10 ms preemption slices, which makes any HT-50ms cluster, raw raft
// included, elect continuously: that measures the Go scheduler, not the
// election.)
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/termfence/termfence/election"
	"github.com/termfence/termfence/internal/freeport"
)

const (
	scCrash    = "crash"
	scKilled   = "killed"
	scHandover = "handover"
)

// Networks (-net).
const (
	netSim = "sim"    // one process, loopback TCP, netsim.go's stream layer
	netLab = "netlab" // a process per node, each in a lab host (labcluster.go)
)

type params struct {
	net           string // netSim or netLab
	rounds        int
	ht, et, llt   time.Duration
	settleTimeout time.Duration
	scenarios     []string
	jsonPath      string
	healthy       time.Duration
	verbose       bool
	burners       int
	// counts, when set, receives both clusters' raft logs (-healthy).
	counts map[string]*logCounter
}

func main() {
	n := flag.Int("n", 50, "rounds of each scenario per system")
	ht := flag.Duration("ht", 100*time.Millisecond, "HeartbeatTimeout (and ElectionTimeout)")
	llt := flag.Duration("llt", 0, "LeaderLeaseTimeout (0: HeartbeatTimeout/2)")
	scen := flag.String("scenarios", "crash,killed,handover", "comma-separated scenarios: crash, killed, handover")
	jsonPath := flag.String("json", "", "write the results to this file (docs/PERFORMANCE.md format)")
	healthy := flag.Duration("healthy", 0, "instead of failovers: run a healthy cluster this long with every core loaded and count elections")
	verbose := flag.Bool("v", false, "log termfence's raft and election events to stderr")
	burners := flag.Int("burners", runtime.NumCPU(), "with -healthy: CPU-burning processes to run (default one per core)")
	burn := flag.Bool("burn", false, "internal: burn one CPU until killed (the -healthy load)")
	netMode := flag.String("net", "sim", `network: "sim" (one process, loopback TCP, a stream layer that plays the dead host) or "netlab" (one process per node, each in a network namespace of its own: internal/netlab; needs root)`)
	if len(os.Args) > 1 && os.Args[1] == "-lab-node" {
		os.Exit(labNodeMain(os.Args[2:]))
	}
	flag.Parse()
	if *burn {
		burnCPU()
	}
	p := params{burners: *burners, rounds: *n, ht: *ht, et: *ht, llt: *llt, jsonPath: *jsonPath, healthy: *healthy, verbose: *verbose, net: *netMode}
	if p.net != netSim && p.net != netLab {
		fmt.Fprintf(os.Stderr, "failover: -net %q: want sim or netlab\n", p.net)
		os.Exit(2)
	}
	if p.net == netLab && p.healthy > 0 {
		fmt.Fprintln(os.Stderr, "failover: -healthy runs in-process only (-net sim)")
		os.Exit(2)
	}
	if p.llt == 0 {
		p.llt = p.ht / 2
	}
	for _, s := range strings.Split(*scen, ",") {
		switch s = strings.TrimSpace(s); s {
		case scCrash, scKilled, scHandover:
			p.scenarios = append(p.scenarios, s)
		case "":
		default:
			fmt.Fprintf(os.Stderr, "failover: unknown scenario %q\n", s)
			os.Exit(2)
		}
	}
	if p.rounds < 1 || len(p.scenarios) == 0 {
		fmt.Fprintln(os.Stderr, "failover: need -n >= 1 and at least one scenario")
		os.Exit(2)
	}
	p.settleTimeout = max(100*p.ht, 10*time.Second)
	var err error
	if p.healthy > 0 {
		err = runHealthy(p, os.Stdout)
	} else {
		err = run(p, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "failover:", err)
		os.Exit(1)
	}
}

// sample is one failover.
type sample struct {
	d     time.Duration
	terms uint64        // new leader's term minus the old leader's
	won   time.Duration // termfence: raft win → confirmed epoch; -1 if not seen
	apply time.Duration // -net netlab crash: how long isolating the host took; -1 otherwise
}

// system is one three-node cluster under test.
type system interface {
	name() string // the result file's system name
	// failover applies the scenario's fault to the leader and returns the
	// time until another node leads; for crash and killed it then restarts
	// the node and waits for the cluster to settle.
	failover(scenario string) (sample, error)
	// term returns the highest current term of the running nodes and the
	// leader's ID ("" if none).
	term() (uint64, string)
	close() error
}

func newSystems(p params, dir string) ([]system, error) {
	tf, err := newTFCluster(p, filepath.Join(dir, "termfence"))
	if err != nil {
		return nil, fmt.Errorf("termfence cluster: %w", err)
	}
	raw, err := newRawCluster(p, filepath.Join(dir, "raw"))
	if err != nil {
		_ = tf.close()
		return nil, fmt.Errorf("raw raft cluster: %w", err)
	}
	return []system{tf, raw}, nil
}

func run(p params, out io.Writer) error {
	dir, err := os.MkdirTemp("", "termfence-failover-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var systems []system
	transportText := "loopback TCP"
	if p.net == netLab {
		var cleanup func()
		if systems, cleanup, err = newLabSystems(p, dir); err != nil {
			return err
		}
		defer cleanup()
		transportText = "TCP between network namespaces (netlab), one process per node"
		fmt.Fprintf(out, "failover: 3 nodes per system, each a process in its own network namespace on a bridge (internal/netlab, 198.18.0.0/24); raft-boltdb (fsync), HT=%v ET=%v LLT=%v, %d rounds each; %s\n",
			p.ht, p.et, p.llt, p.rounds, host())
		fmt.Fprintf(out, "  crash: the leader's host's switch port goes down (silent); killed: SIGKILL of its process (host up: its port refuses); handover: Resign / LeadershipTransfer in the leader's process; clocks: CLOCK_MONOTONIC in every process\n")
	} else {
		if systems, err = newSystems(p, dir); err != nil {
			return err
		}
		defer func() {
			for _, s := range systems {
				_ = s.close()
			}
		}()
		fmt.Fprintf(out, "failover: 3 nodes, loopback TCP, raft-boltdb (fsync), HT=%v ET=%v LLT=%v, %d rounds each; %s\n",
			p.ht, p.et, p.llt, p.rounds, host())
	}
	started := time.Now().UTC()
	samples := make(map[string][][]sample) // scenario → per system
	for _, sc := range p.scenarios {
		samples[sc] = make([][]sample, len(systems))
		for round := range p.rounds {
			for i, s := range systems {
				smp, err := s.failover(sc)
				if err != nil {
					return fmt.Errorf("%s %s round %d: %w", s.name(), sc, round, err)
				}
				samples[sc][i] = append(samples[sc][i], smp)
			}
		}
	}

	var file resultFile
	file.Version = 1
	fmt.Fprintf(out, "\n%-36s %8s %8s %8s %8s %8s   %s\n", "time until another node leads", "p50", "p90", "p99", "max", "mean", "terms/failover")
	for _, sc := range p.scenarios {
		var p50 [2]time.Duration
		for i, s := range systems {
			smp := samples[sc][i]
			ds := make([]time.Duration, len(smp))
			var terms uint64
			for j, x := range smp {
				ds[j] = x.d
				terms += x.terms
			}
			st := summarize(ds)
			p50[i] = st.p50
			tpf := float64(terms) / float64(len(smp))
			tpfText := "-"
			if sc != scHandover {
				tpfText = fmt.Sprintf("%.2f", tpf)
			}
			rowName := s.name()
			if p.net == netLab {
				rowName += " (netlab)"
			}
			fmt.Fprintf(out, "%-36s %6.1fms %6.1fms %6.1fms %6.1fms %6.1fms   %s\n", sc+": "+rowName,
				ms(st.p50), ms(st.p90), ms(st.p99), ms(st.max), ms(mean(ds)), tpfText)
			fmt.Fprintf(out, "%-36s %7.2fx %7.2fx %7.2fx %7.2fx %7.2fx\n", "  as a multiple of HT",
				st.p50.Seconds()/p.ht.Seconds(), st.p90.Seconds()/p.ht.Seconds(), st.p99.Seconds()/p.ht.Seconds(),
				st.max.Seconds()/p.ht.Seconds(), mean(ds).Seconds()/p.ht.Seconds())
			r := result{
				System: s.name(), Scenario: sc, HeartbeatTimeoutMS: ms(p.ht), Nodes: 3,
				Params: map[string]string{
					"et": p.et.String(), "llt": p.llt.String(), "store": "raft-boltdb", "transport": transportText,
				},
				Host: host(), Started: started,
			}
			if p.net == netLab {
				r.Label = rowName
				r.Params["net"] = netLab
			}
			for _, d := range ds {
				r.SamplesMS = append(r.SamplesMS, math.Round(ms(d)*1000)/1000)
			}
			if sc != scHandover {
				r.Params["terms_per_failover"] = fmt.Sprintf("%.3f", tpf)
			}
			var won []time.Duration
			for _, x := range smp {
				if x.won >= 0 {
					won = append(won, x.won)
				}
			}
			if len(won) > 0 {
				w := summarize(won)
				fmt.Fprintf(out, "%-36s %6.1fms %6.1fms %6.1fms %6.1fms %6.1fms   (%d of %d rounds seen)\n", "  raft win → confirmed epoch",
					ms(w.p50), ms(w.p90), ms(w.p99), ms(w.max), ms(mean(won)), len(won), len(smp))
				r.Params["win_to_confirmed_p50"] = fmt.Sprintf("%.3fms", ms(w.p50))
			}
			var applied []time.Duration
			for _, x := range smp {
				if x.apply >= 0 {
					applied = append(applied, x.apply)
				}
			}
			if len(applied) > 0 {
				a := summarize(applied)
				fmt.Fprintf(out, "%-36s %6.3fms %6.3fms %6.3fms %6.3fms (included above)\n", "  isolating the host took",
					ms(a.p50), ms(a.p90), ms(a.p99), ms(a.max))
			}
			file.Results = append(file.Results, r)
		}
		fmt.Fprintf(out, "%-36s p50 %.3f\n", "  ratio termfence/raw", ratio(p50[0], p50[1]))
	}
	if p.jsonPath != "" {
		if err := writeJSON(p.jsonPath, file); err != nil {
			return err
		}
		fmt.Fprintf(out, "\nwrote %s\n", p.jsonPath)
	}
	return nil
}

// runHealthy runs both clusters with no fault for p.healthy while one
// goroutine per core burns CPU, and counts term changes and leader changes.
func runHealthy(p params, out io.Writer) error {
	p.counts = map[string]*logCounter{"termfence": newLogCounter(), "hashicorp-raft": newLogCounter()}
	dir, err := os.MkdirTemp("", "termfence-healthy-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	systems, err := newSystems(p, dir)
	if err != nil {
		return err
	}
	defer func() {
		for _, s := range systems {
			_ = s.close()
		}
	}()
	burners := p.burners
	fmt.Fprintf(out, "healthy: 3 nodes per system, loopback TCP, raft-boltdb (fsync), HT=%v ET=%v LLT=%v, %v with %d CPU-burning processes; %s\n",
		p.ht, p.et, p.llt, p.healthy, burners, host())
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var procs []*exec.Cmd
	defer func() {
		for _, c := range procs {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}()
	for range burners {
		c := exec.Command(exe, "-burn")
		if err := c.Start(); err != nil {
			return fmt.Errorf("starting a CPU burner: %w", err)
		}
		procs = append(procs, c)
	}

	type track struct {
		startTerm, lastTerm uint64
		leader              string
		leaderChanges       int
		leaderless          time.Duration
	}
	tr := make([]track, len(systems))
	for i, s := range systems {
		tr[i].startTerm, tr[i].leader = s.term()
		tr[i].lastTerm = tr[i].startTerm
	}
	tick := 5 * time.Millisecond
	printed := 0
	deadline := time.Now().Add(p.healthy)
	nextReport := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		time.Sleep(tick) // poll interval
		for i, s := range systems {
			term, leader := s.term()
			if leader == "" {
				tr[i].leaderless += tick
			}
			if leader != "" && leader != tr[i].leader {
				if tr[i].leader != "" {
					tr[i].leaderChanges++
				}
				tr[i].leader = leader
			}
			if term != tr[i].lastTerm {
				printed++
				if printed > 100 {
					tr[i].lastTerm = term
					continue
				}
				fmt.Fprintf(out, "%s %s: term %d -> %d (leader %q)\n", time.Now().Format("15:04:05.000"), s.name(), tr[i].lastTerm, term, leader)
				tr[i].lastTerm = term
			}
		}
		if time.Now().After(nextReport) {
			nextReport = nextReport.Add(time.Minute)
			fmt.Fprintf(out, "%s still running\n", time.Now().Format("15:04:05"))
		}
	}
	for i, s := range systems {
		fmt.Fprintf(out, "%-16s false elections (terms started): %d   leader changes: %d   time without a known leader (polled every %v): %v\n",
			s.name(), tr[i].lastTerm-tr[i].startTerm, tr[i].leaderChanges, tick, tr[i].leaderless)
		fmt.Fprintf(out, "%-16s   raft logs: %s\n", "", p.counts[s.name()].summary())
	}
	return nil
}

func host() string {
	return fmt.Sprintf("%s/%s %d CPU %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
}

// resultFile and result mirror perf/results.File and Result (same JSON
// tags). The root module must not import the perf module, which pulls etcd.
type resultFile struct {
	Version int      `json:"version"`
	Results []result `json:"results"`
}

type result struct {
	System             string            `json:"system"`
	Scenario           string            `json:"scenario"`
	HeartbeatTimeoutMS float64           `json:"heartbeat_timeout_ms"`
	LeaseTTLMS         float64           `json:"lease_ttl_ms,omitempty"`
	SamplesMS          []float64         `json:"samples_ms"`
	Failures           int               `json:"failures,omitempty"`
	Nodes              int               `json:"nodes,omitempty"`
	Label              string            `json:"label,omitempty"`
	Params             map[string]string `json:"params,omitempty"`
	Host               string            `json:"host,omitempty"`
	Started            time.Time         `json:"started,omitzero"`
}

// writeJSON replaces path with f atomically.
func writeJSON(path string, f resultFile) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

type stats struct{ p50, p90, p99, max time.Duration }

// summarize returns nearest-rank percentiles.
func summarize(ds []time.Duration) stats {
	s := slices.Clone(ds)
	slices.Sort(s)
	pct := func(q float64) time.Duration {
		i := int(math.Ceil(q*float64(len(s)))) - 1
		return s[max(i, 0)]
	}
	return stats{pct(0.50), pct(0.90), pct(0.99), s[len(s)-1]}
}

func mean(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

// freePorts reserves n loopback addresses (listen on port 0, then release),
// so nodes can be restarted on the same address.
func freePorts(n int) ([]string, error) { return freeport.Addrs(n) }

// waitUntil polls cond every millisecond until it holds or timeout passes.
func waitUntil(timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(time.Millisecond) // poll interval
	}
	return nil
}

// firstOf runs watch for each index but skip and returns the time and value
// the first of them reported. watch must return when ctx ends.
func firstOf[T any](ctx context.Context, n, skip int, watch func(ctx context.Context, i int) (T, bool)) (time.Time, T, error) {
	type hit struct {
		t time.Time
		v T
	}
	ctx, cancel := context.WithCancel(ctx)
	got := make(chan hit, n)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for i := range n {
		if i == skip {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if v, ok := watch(ctx, i); ok {
				got <- hit{time.Now(), v}
			}
		}()
	}
	select {
	case h := <-got:
		return h.t, h.v, nil
	case <-ctx.Done():
		var zero T
		return time.Time{}, zero, errors.New("no new leader in time")
	}
}

// ---- termfence ----

type tfNode struct {
	id, addr, dir string
	el            *election.Election
	host          *hostLayer
}

type tfCluster struct {
	p     params
	nodes []*tfNode
	boot  []election.Server
}

func newTFCluster(p params, dir string) (*tfCluster, error) {
	addrs, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	c := &tfCluster{p: p}
	for i, a := range addrs {
		nd := &tfNode{id: fmt.Sprintf("tf%d", i+1), addr: a, dir: filepath.Join(dir, fmt.Sprint(i+1))}
		c.nodes = append(c.nodes, nd)
		c.boot = append(c.boot, election.Server{ID: nd.id, Addr: a})
	}
	for _, nd := range c.nodes {
		if err := c.start(nd); err != nil {
			_ = c.close()
			return nil, err
		}
	}
	return c, c.settle()
}

func (c *tfCluster) name() string { return "termfence" }

func (c *tfCluster) start(nd *tfNode) error {
	// A raw NetworkTransport satisfies transport.Transport; election.New
	// switches its heartbeat fast path off (transport.MainLoopOnly;
	// invariant I2 in docs/DESIGN.md) as it does for every transport.
	nt, hl, err := newHostTransport(nd.addr)
	if err != nil {
		return err
	}
	tr := noPipeline{nt} // as transport.NewTCP
	logger := slog.New(slog.DiscardHandler)
	if lc := c.p.counts[c.name()]; lc != nil {
		logger = slog.New(slog.NewTextHandler(lc, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", nd.id)
	}
	if c.p.verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", nd.id)
	}
	el, err := election.New(election.Config{
		ID: nd.id, Cluster: "failover", DataDir: nd.dir, Transport: tr, Bootstrap: c.boot,
		HeartbeatTimeout: c.p.ht, ElectionTimeout: c.p.et, LeaderLeaseTimeout: c.p.llt,
		Logger: logger,
	})
	if err != nil {
		_ = tr.Close()
		return err
	}
	nd.el, nd.host = el, hl
	return nil
}

// leader returns the index of the node holding an epoch, or -1.
func (c *tfCluster) leader() int {
	for i, nd := range c.nodes {
		if nd.el != nil {
			if _, err := nd.el.Epoch(); err == nil {
				return i
			}
		}
	}
	return -1
}

func (c *tfCluster) term() (uint64, string) {
	var t uint64
	for _, nd := range c.nodes {
		t = max(t, nd.el.Raft().CurrentTerm())
	}
	if i := c.leader(); i >= 0 {
		return t, c.nodes[i].id
	}
	return t, ""
}

// settle waits until one node holds an epoch and every node follows it.
func (c *tfCluster) settle() error {
	return waitUntil(c.p.settleTimeout, "the termfence cluster to settle", func() bool {
		i := c.leader()
		if i < 0 {
			return false
		}
		for _, nd := range c.nodes {
			if nd.el.Status().LeaderID != c.nodes[i].id {
				return false
			}
		}
		return true
	})
}

func (c *tfCluster) failover(scenario string) (sample, error) {
	if err := c.settle(); err != nil {
		return sample{}, err
	}
	li := c.leader()
	if li < 0 {
		return sample{}, errors.New("no leader")
	}
	ld := c.nodes[li]
	old, err := ld.el.Epoch()
	if err != nil {
		return sample{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.p.settleTimeout)
	defer cancel()
	// Subscribe before acting so no change is missed.
	updates := make([]<-chan election.Leadership, len(c.nodes))
	for i, nd := range c.nodes {
		if i != li {
			updates[i] = nd.el.Observe(ctx)
		}
	}
	t0 := time.Now()
	if c.p.verbose {
		fmt.Fprintf(os.Stderr, "%s ---- %s on %s (%v)\n", t0.Format("15:04:05.000000"), scenario, ld.id, old)
	}
	switch scenario {
	case scCrash:
		ld.host.freeze()
	case scKilled:
		err = ld.el.Raft().Shutdown().Error() // raft and transport, no handover
	case scHandover:
		go func() { _ = ld.el.Resign(context.Background()) }() // the clock stops on the new epoch, not on Resign's return
	}
	type seen struct {
		term uint64
		won  time.Duration
	}
	var t1 time.Time
	var s seen
	if err == nil {
		t1, s, err = firstOf(ctx, len(c.nodes), li, func(ctx context.Context, i int) (seen, bool) {
			var won time.Time
			for {
				select {
				case <-ctx.Done():
					return seen{}, false
				case l, ok := <-updates[i]:
					if !ok {
						return seen{}, false
					}
					if l.Self && l.Term > old.Term && l.Epoch.IsZero() && won.IsZero() {
						won = time.Now()
					}
					if l.Leading() && l.Epoch.Term > old.Term {
						d := time.Duration(-1)
						if !won.IsZero() {
							d = time.Since(won)
						}
						return seen{l.Epoch.Term, d}, true
					}
				}
			}
		})
	}
	if scenario != scHandover {
		// Close the connections first: raft waits for its goroutines
		// before it closes the transport, and those blocked on a silent
		// connection would wait for the RPC timeout.
		_ = ld.host.Close()
		if serr := ld.el.Raft().Shutdown().Error(); serr != nil && err == nil {
			err = serr
		}
		if cerr := ld.el.Close(); cerr != nil && err == nil {
			err = cerr
		}
		ld.el = nil
		if serr := c.start(ld); serr != nil && err == nil {
			err = serr
		}
	}
	if err != nil {
		return sample{}, err
	}
	return sample{d: t1.Sub(t0), terms: s.term - old.Term, won: s.won, apply: -1}, c.settle()
}

func (c *tfCluster) close() error {
	var errs []error
	for _, nd := range c.nodes {
		if nd.el != nil {
			errs = append(errs, nd.el.Close())
			nd.el = nil
		}
	}
	return errors.Join(errs...)
}

// ---- raw hashicorp/raft, wired the plain way ----

type rawNode struct {
	id, addr, dir string
	r             *raft.Raft
	store         *raftboltdb.BoltStore
	host          *hostLayer
}

type rawCluster struct {
	p     params
	nodes []*rawNode
	conf  raft.Configuration
}

func newRawCluster(p params, dir string) (*rawCluster, error) {
	addrs, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	c := &rawCluster{p: p}
	for i, a := range addrs {
		nd := &rawNode{id: fmt.Sprintf("raw%d", i+1), addr: a, dir: filepath.Join(dir, fmt.Sprint(i+1))}
		c.nodes = append(c.nodes, nd)
		c.conf.Servers = append(c.conf.Servers, raft.Server{ID: raft.ServerID(nd.id), Address: raft.ServerAddress(a)})
	}
	for _, nd := range c.nodes {
		if err := c.start(nd); err != nil {
			_ = c.close()
			return nil, err
		}
	}
	return c, c.settle()
}

func (c *rawCluster) name() string { return "hashicorp-raft" }

func (c *rawCluster) start(nd *rawNode) error {
	if err := os.MkdirAll(nd.dir, 0o700); err != nil {
		return err
	}
	trans, hl, err := newHostTransport(nd.addr)
	if err != nil {
		return err
	}
	store, err := raftboltdb.New(raftboltdb.Options{
		Path: filepath.Join(nd.dir, "raft.db"), BoltOptions: &bbolt.Options{Timeout: time.Second},
	})
	if err != nil {
		_ = trans.Close()
		return err
	}
	logs, err := raft.NewLogCache(512, store)
	if err != nil {
		_ = trans.Close()
		_ = store.Close()
		return err
	}
	snaps, err := raft.NewFileSnapshotStore(nd.dir, 2, io.Discard)
	if err != nil {
		_ = trans.Close()
		_ = store.Close()
		return err
	}
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(nd.id)
	conf.HeartbeatTimeout, conf.ElectionTimeout, conf.LeaderLeaseTimeout = c.p.ht, c.p.et, c.p.llt
	conf.Logger = hclog.NewNullLogger()
	if lc := c.p.counts[c.name()]; lc != nil {
		conf.Logger = hclog.New(&hclog.LoggerOptions{Name: nd.id, Level: hclog.Debug, Output: lc})
	}
	exists, err := raft.HasExistingState(logs, store, snaps)
	if err == nil && !exists {
		err = raft.BootstrapCluster(conf, logs, store, snaps, trans, c.conf)
	}
	if err != nil {
		_ = trans.Close()
		_ = store.Close()
		return err
	}
	r, err := raft.NewRaft(conf, nopFSM{}, logs, store, snaps, trans)
	if err != nil {
		_ = trans.Close()
		_ = store.Close()
		return err
	}
	nd.r, nd.store, nd.host = r, store, hl
	return nil
}

func (c *rawCluster) leader() int {
	for i, nd := range c.nodes {
		if nd.r != nil && nd.r.State() == raft.Leader {
			return i
		}
	}
	return -1
}

func (c *rawCluster) term() (uint64, string) {
	var t uint64
	for _, nd := range c.nodes {
		t = max(t, nd.r.CurrentTerm())
	}
	if i := c.leader(); i >= 0 {
		return t, c.nodes[i].id
	}
	return t, ""
}

func (c *rawCluster) settle() error {
	return waitUntil(c.p.settleTimeout, "the raw cluster to settle", func() bool {
		i := c.leader()
		if i < 0 {
			return false
		}
		for _, nd := range c.nodes {
			if _, id := nd.r.LeaderWithID(); string(id) != c.nodes[i].id {
				return false
			}
		}
		return true
	})
}

func (c *rawCluster) failover(scenario string) (sample, error) {
	if err := c.settle(); err != nil {
		return sample{}, err
	}
	li := c.leader()
	if li < 0 {
		return sample{}, errors.New("no leader")
	}
	ld := c.nodes[li]
	oldTerm := ld.r.CurrentTerm()
	for i, nd := range c.nodes { // drop stale values: LeaderCh keeps the last one
		if i != li {
			select {
			case <-nd.r.LeaderCh():
			default:
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.p.settleTimeout)
	defer cancel()
	t0 := time.Now()
	var err error
	switch scenario {
	case scCrash:
		ld.host.freeze()
	case scKilled:
		err = ld.r.Shutdown().Error() // also closes the NetworkTransport
	case scHandover:
		go func() { _ = ld.r.LeadershipTransfer().Error() }()
	}
	var t1 time.Time
	var term uint64
	if err == nil {
		t1, term, err = firstOf(ctx, len(c.nodes), li, func(ctx context.Context, i int) (uint64, bool) {
			r := c.nodes[i].r
			for {
				select {
				case <-ctx.Done():
					return 0, false
				case v := <-r.LeaderCh():
					if t := r.CurrentTerm(); v && t > oldTerm {
						return t, true
					}
				}
			}
		})
	}
	if scenario != scHandover {
		_ = ld.host.Close() // see tfCluster.failover
		if serr := ld.r.Shutdown().Error(); serr != nil && err == nil {
			err = serr
		}
		if cerr := ld.store.Close(); cerr != nil && err == nil {
			err = cerr
		}
		ld.r, ld.store = nil, nil
		if serr := c.start(ld); serr != nil && err == nil {
			err = serr
		}
	}
	if err != nil {
		return sample{}, err
	}
	return sample{d: t1.Sub(t0), terms: term - oldTerm, won: -1, apply: -1}, c.settle()
}

func (c *rawCluster) close() error {
	var errs []error
	for _, nd := range c.nodes {
		if nd.r != nil {
			errs = append(errs, nd.r.Shutdown().Error(), nd.store.Close())
			nd.r = nil
		}
	}
	return errors.Join(errs...)
}

type nopFSM struct{}

func (nopFSM) Apply(*raft.Log) any                 { return nil }
func (nopFSM) Snapshot() (raft.FSMSnapshot, error) { return nopSnap{}, nil }
func (nopFSM) Restore(rc io.ReadCloser) error      { return rc.Close() }

type nopSnap struct{}

func (nopSnap) Persist(s raft.SnapshotSink) error { return s.Close() }
func (nopSnap) Release()                          {}

var (
	_ system   = (*tfCluster)(nil)
	_ system   = (*rawCluster)(nil)
	_ raft.FSM = nopFSM{}
)

// burnCPU spins one core until the process is killed.
func burnCPU() {
	runtime.GOMAXPROCS(1)
	x := uint64(1)
	for {
		x = x*6364136223846793005 + 1442695040888963407
		if x == 0 {
			fmt.Println(x) // never: keeps the loop from being optimised away
		}
	}
}

// logCounter counts raft log lines that explain an election: a leader
// stepping down because it lost contact with a quorum (its lease), a
// follower starting one, and termfence's waker waking raft.
type logCounter struct {
	mu sync.Mutex
	n  map[string]int
}

var countedLines = []struct{ key, match string }{
	{"leader lease lost (stepped down)", "failed to contact quorum of nodes, stepping down"},
	{"follower started an election", "heartbeat timeout reached, starting election"},
	{"pre-vote won", "pre-vote successful"},
	{"termfence waker woke raft", "wake: leader silent, woke raft"},
}

func newLogCounter() *logCounter { return &logCounter{n: make(map[string]int)} }

func (l *logCounter) Write(p []byte) (int, error) {
	line := string(p)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range countedLines {
		if strings.Contains(line, c.match) {
			l.n[c.key]++
		}
	}
	return len(p), nil
}

func (l *logCounter) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var parts []string
	for _, c := range countedLines {
		parts = append(parts, fmt.Sprintf("%s %d", c.key, l.n[c.key]))
	}
	return strings.Join(parts, ", ")
}
