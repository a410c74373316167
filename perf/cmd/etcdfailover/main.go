package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/version"

	"github.com/termfence/termfence/perf/results"

	"github.com/termfence/termfence/perf/internal/etcdserver"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, err)
		}
		os.Exit(2)
	}
}

// options are the command-line flags.
type options struct {
	rounds     int
	clients    int
	ttl        int
	scenarios  []string
	tickMs     uint
	electionMs uint
	jsonPath   string
	seed       uint64
	roundLimit time.Duration
	verbose    bool
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("etcdfailover", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.rounds, "n", 20, "rounds per scenario")
	fs.IntVar(&o.clients, "clients", 3, "campaigning clients at the start of each round (>= 2)")
	fs.IntVar(&o.ttl, "ttl", 1, "requested session TTL in seconds (concurrency.WithTTL); the server may raise it")
	scen := fs.String("scenario", "crash,handover", "comma-separated scenarios: crash, handover")
	fs.UintVar(&o.tickMs, "heartbeat-interval", 100, "etcd --heartbeat-interval in ms (etcd default 100)")
	fs.UintVar(&o.electionMs, "election-timeout", 1000, "etcd --election-timeout in ms (etcd default 1000); the minimum lease TTL is ceil(1.5 × this) s")
	fs.StringVar(&o.jsonPath, "json", "", "also write the results to this file (format: docs/PERFORMANCE.md)")
	fs.Uint64Var(&o.seed, "seed", uint64(time.Now().UnixNano()), "seed for the random crash delays")
	fs.DurationVar(&o.roundLimit, "round-limit", 30*time.Second, "fail if a round has no new leader by then")
	fs.BoolVar(&o.verbose, "v", false, "print every round, and etcd's info log")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("etcdfailover: unexpected arguments %q", fs.Args())
	}
	for s := range strings.SplitSeq(*scen, ",") {
		switch s = strings.TrimSpace(s); s {
		case scenarioCrash, scenarioHandover:
			o.scenarios = append(o.scenarios, s)
		default:
			return o, fmt.Errorf("etcdfailover: unknown scenario %q (want crash or handover)", s)
		}
	}
	switch {
	case o.rounds < 1:
		return o, errors.New("etcdfailover: -n must be at least 1")
	case o.clients < 2:
		return o, errors.New("etcdfailover: -clients must be at least 2")
	case o.ttl < 1:
		return o, errors.New("etcdfailover: -ttl must be at least 1 (etcd leases are whole seconds)")
	case o.roundLimit <= 0:
		return o, errors.New("etcdfailover: -round-limit must be positive")
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	srv, err := etcdserver.Start(ctx, etcdserver.Config{TickMs: o.tickMs, ElectionMs: o.electionMs, Verbose: o.verbose})
	if err != nil {
		return err
	}
	defer func() { _ = srv.Close() }()

	host := fmt.Sprintf("%s/%s %d CPU %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
	fmt.Fprintf(stdout, "etcd %s embedded, 1 member, heartbeat-interval %dms, election-timeout %dms; %d clients; %s\n",
		version.Version, o.tickMs, o.electionMs, o.clients, host)

	file := results.File{Version: results.Version}
	for i, sc := range o.scenarios {
		started := time.Now()
		cfg := benchConfig{
			Endpoint:   srv.Endpoint,
			Scenario:   sc,
			Rounds:     o.rounds,
			Clients:    o.clients,
			TTL:        o.ttl,
			RoundLimit: o.roundLimit,
			Seed:       o.seed + uint64(i),
		}
		if o.verbose {
			cfg.Progress = func(round int, d time.Duration) {
				fmt.Fprintf(stdout, "  %s round %d: %.1f ms\n", sc, round, msOf(d))
			}
		}
		res, err := bench(ctx, cfg)
		if err != nil {
			return fmt.Errorf("%s: %w", sc, err)
		}
		samples := make([]float64, len(res.Samples))
		for j, d := range res.Samples {
			samples[j] = msOf(d)
		}
		s := results.Summarize(samples)
		fmt.Fprintf(stdout, "%-8s requested TTL %ds, granted %v: n=%d  p50 %.0f  p90 %.0f  p99 %.0f  max %.0f  (min %.0f) ms\n",
			sc, o.ttl, res.GrantedTTL, s.N, s.P50, s.P90, s.P99, s.Max, s.Min)
		file.Results = append(file.Results, results.Result{
			System:     results.SystemEtcd,
			Scenario:   sc,
			LeaseTTLMS: msOf(res.GrantedTTL),
			SamplesMS:  samples,
			Nodes:      o.clients,
			Params: map[string]string{
				"etcd_version":       version.Version,
				"etcd_members":       "1",
				"heartbeat_interval": fmt.Sprintf("%dms", o.tickMs),
				"election_timeout":   fmt.Sprintf("%dms", o.electionMs),
				"requested_ttl":      fmt.Sprintf("%ds", o.ttl),
				"seed":               fmt.Sprint(cfg.Seed),
				"measured":           "fault -> next client's Campaign returns",
			},
			Host:    host,
			Started: started.UTC().Truncate(time.Second),
		})
	}
	if o.jsonPath != "" {
		if err := results.WriteFile(o.jsonPath, file); err != nil {
			return err
		}
	}
	return nil
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
