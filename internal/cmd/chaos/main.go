// Command chaos runs termfence's process-level fault suite (package
// internal/chaos) outside `go test`: it builds examples/cluster (or uses
// -bin), runs the nemesis against it and prints the summary line. It exits
// 0 if every check passed, 1 on a violation (the visualization and seed are
// written under -failures), 2 on a harness error.
//
//	go run ./internal/cmd/chaos -nodes 5 -duration 10m
//	go run ./internal/cmd/chaos -seed 42 -unfenced   # the control: expect exit 1
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/termfence/termfence/internal/chaos"
)

func main() { os.Exit(run()) }

func run() int {
	nodes := flag.Int("nodes", 3, "number of nodes: 3 or 5")
	hb := flag.Duration("heartbeat", 150*time.Millisecond, "node -heartbeat (also the nemesis's lease)")
	faults := flag.Int("faults", 30, "inject at least this many faults")
	duration := flag.Duration("duration", 0, "and keep injecting for at least this long")
	seed := flag.Int64("seed", time.Now().UnixNano(), "nemesis seed")
	unfenced := flag.Bool("unfenced", false, "run the store with -unfenced (the control experiment)")
	backend := flag.String("backend", "sqlite", "store backend: sqlite or bolt")
	bin := flag.String("bin", "", "prebuilt examples/cluster binary (default: build it)")
	dir := flag.String("dir", "", "work directory (default: a new temporary directory, removed on success)")
	failures := flag.String("failures", "", "where failed runs are saved (default: <module root>/failures)")
	verbose := flag.Bool("v", false, "print every fault")
	recoveryBound := flag.Duration("recovery-bound", 0, "how long service may take to come back after a fault (0: derived from -heartbeat, scaled for the load)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root, err := chaos.ModuleRoot(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	work := *dir
	if work == "" {
		if work, err = os.MkdirTemp("", "termfence-chaos-"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	if *bin == "" {
		*bin = filepath.Join(work, "cluster")
		if err := chaos.Build(ctx, root, *bin); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	forge := filepath.Join(work, "forge")
	if err := chaos.BuildForge(ctx, root, forge); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if *failures == "" {
		*failures = filepath.Join(root, "failures")
	}
	cfg := chaos.Config{
		Binary: *bin, Forge: forge, Dir: filepath.Join(work, "run"), FailureDir: *failures, Nodes: *nodes, Heartbeat: *hb,
		Faults: *faults, Duration: *duration, Seed: *seed, Unfenced: *unfenced, Backend: *backend,
		CheckTimeout: 30 * time.Minute, RecoveryBound: *recoveryBound,
	}
	if *verbose {
		cfg.Log = os.Stderr
	}
	if *nodes == 5 {
		cfg.Writers, cfg.Resources, cfg.Think, cfg.ReadEvery = 8, 8, 40*time.Millisecond, 60*time.Millisecond
	}
	fmt.Fprintf(os.Stderr, "chaos: seed=%d (replay with -seed %d)\n", *seed, *seed)
	res, err := chaos.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for _, s := range res.Details {
		fmt.Fprintln(os.Stderr, s)
	}
	for _, s := range res.Recovery.Errors() {
		fmt.Fprintln(os.Stderr, s)
	}
	fmt.Println(res.Line)
	fmt.Println(res.Recovery.Line())
	if !res.OK() {
		fmt.Fprintf(os.Stderr, "violation: visualization and seed in %s (logs in %s)\n", res.FailurePath, work)
		return 1
	}
	if *dir == "" {
		_ = os.RemoveAll(work)
	}
	return 0
}
