package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// A scenario is one case of the fencing story (examples/cluster/README.md), run for real on a three-node
// Raft cluster. Each lives in a file of its own (scenario_NAME.go) and is
// registered by one row of the scenarios table below; adding a case is:
// write its run function, add its row, add its test to scenario_test.go.

// scenarioDef is one row of the table.
type scenarioDef struct {
	name  string
	essay string // the case: which part of the story (see the README's sources)
	about string // one line: what the run shows
	// flags lists the variant flags this scenario accepts besides the
	// common ones (-heartbeat, -v, -svg, -dsn): unfenced, volatile, tx,
	// backend, api-only.
	flags []string
	run   func(ctx context.Context, e *env) (*summary, error)
}

// scenarios is the table `-scenario list` prints, in this order.
var scenarios = []scenarioDef{
	{"paused", "Kleppmann's picture (tokens 33/34)", "a leader pauses past its lease; its late write is refused (-unfenced: it lands and B's update is lost)", []string{"unfenced", "backend"}, runPaused},
	{"short-pause", "exercise: a short pause", "a pause shorter than the lease: fenced and unfenced stores both \"work\" — which proves nothing about safety", nil, runShortPause},
	{"audit-log", "exercise: an unchecked second resource", "a second resource that checks no token: the store refuses A, the audit log records A's write after B's", nil, runAuditLog},
	{"restart", "exercise: the lock service restarts", "the whole cluster restarts: with raft-boltdb terms continue above the store's; with -volatile they go back and the new leader is refused", []string{"volatile"}, runRestart},
	{"two-resources", "where fencing stops: several resources", "one write to two stores, only one fenced: the stale write is half refused", nil, runTwoResources},
	{"half-done", "where fencing stops: fencing rejects, it does not undo", "a two-step write without a transaction leaves step one behind; with -tx (sqlfence Tx) it leaves nothing", []string{"tx"}, runHalfDone},
	{"stale-read", "where fencing stops: reads are not fenced", "A reads, pauses, acts on stale data; an unfenced read by the deposed leader is served, a Check-ed one refused", nil, runStaleRead},
	{"efficiency", "exercise: efficiency or correctness", "a job guarded by an efficiency lock runs twice: a duplicate, not corruption — no fence needed", nil, runEfficiency},
	{"lab", "The idea on three machines (-lab)", "node processes on hosts of their own (Linux network namespaces; root): a leader paused by SIGSTOP, then one partitioned by the kernel; both late writes refused", []string{"unfenced"}, runLab},
	{"gc-pause", "The idea in one minute (a real pause)", "a node process is SIGSTOPped while it leads, a new leader is elected, SIGCONT: its late write is refused", []string{"unfenced"}, runGCPause},
	{"object-store", "the paused leader, against an S3 object store", "A's PUT, read before its pause and sent after it, is refused by a versitygw S3 server (conditional PUT, objectfence); -unfenced: it lands and B's update is lost", []string{"unfenced"}, runObjectStore},
	{"redis", "the paused leader, with the fence inside Redis", "A's late write through the fence library is refused by redis-server itself, and so is a forged token's; -unfenced: A's plain SET lands and B's update is lost", []string{"unfenced"}, runRedis},
	{"roles", "Many leaders on one group (election roles)", "a dozen roles on three node processes, each owner writing its role's resource with its role token; the owner of several is frozen (SIGSTOP), its roles move, its late writes are refused, then it is killed", nil, runRoles},
	{"every-write-path", "where fencing stops: every write path must check", "PostgreSQL guards the table (pgtrigger): A's batch job writing around the store's API is refused by the database (-api-only: it lands, B's update is lost)", []string{"api-only"}, runEveryWritePath},
}

// findScenario returns the row named name.
func findScenario(name string) (scenarioDef, bool) {
	i := slices.IndexFunc(scenarios, func(s scenarioDef) bool { return s.name == name })
	if i < 0 {
		return scenarioDef{}, false
	}
	return scenarios[i], true
}

// listScenarios prints one line per scenario.
func listScenarios(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, s := range scenarios {
		var fl []string
		for _, f := range s.flags {
			fl = append(fl, "-"+f)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.name, strings.Join(fl, " "), s.essay, s.about)
	}
	_ = tw.Flush()
}

// options are the command line of a scenario run.
type options struct {
	scenario string
	unfenced bool
	volatile bool
	tx       bool
	backend  string
	apiOnly  bool
	dsn      string
	hb       time.Duration
	verbose  bool
	svg      string
	lab      bool
}

// demoTimeout bounds one whole run.
const demoTimeout = 60 * time.Second

// demoMain runs `cluster [-scenario NAME] [flags]`.
func demoMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("cluster", stderr)
	var o options
	demoFlags(fs, &o)
	fs.Usage = func() { usage(fs) }
	if err := parse(fs, args); err != nil {
		return err
	}
	if o.lab {
		scenarioSet := false
		fs.Visit(func(f *flag.Flag) { scenarioSet = scenarioSet || f.Name == "scenario" })
		if scenarioSet && o.scenario != "lab" {
			fmt.Fprintf(stderr, "cluster: -lab runs -scenario lab, not %q\n", o.scenario)
			return errUsage
		}
		o.scenario = "lab"
	}
	if o.scenario == "list" {
		listScenarios(stdout)
		return nil
	}
	def, ok := findScenario(o.scenario)
	if !ok {
		fmt.Fprintf(stderr, "cluster: unknown -scenario %q; the scenarios are:\n", o.scenario)
		listScenarios(stderr)
		return errUsage
	}
	// A variant flag the scenario does not use is a mistake, not a no-op.
	var misused []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "unfenced", "volatile", "tx", "backend", "api-only":
			if !slices.Contains(def.flags, f.Name) {
				misused = append(misused, "-"+f.Name)
			}
		}
	})
	if len(misused) > 0 {
		fmt.Fprintf(stderr, "cluster: -scenario %s does not use %s\n", def.name, strings.Join(misused, ", "))
		return errUsage
	}
	if o.hb < 20*time.Millisecond {
		return fmt.Errorf("-heartbeat %v is below 20ms", o.hb)
	}
	ctx, cancel := context.WithTimeout(ctx, demoTimeout)
	defer cancel()
	e, err := newEnv(o, stdout, stderr)
	if err != nil {
		return err
	}
	defer e.close()
	sum, err := def.run(ctx, e)
	e.tl.finish()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("scenario %s did not finish within %v: %w", def.name, demoTimeout, err)
		}
		return err
	}
	sum.add("elapsed", fmt.Sprintf("%dms", e.tl.now().Milliseconds()))
	if o.svg != "" {
		if err := writeSVGFile(o.svg, e.tl); err != nil {
			return err
		}
	}
	fmt.Fprintln(stdout, sum.String())
	return nil
}

// usage prints the whole command's usage (also `cluster help`).
func usage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprintf(w, `usage: cluster [-scenario NAME] [flags]   run one case of the fencing story (default: paused)
       cluster -scenario list             list the cases
       cluster node [flags]               one Raft node (cluster node -h)
       cluster store [flags]              the fenced store (cluster store -h)
       cluster help                       this text

examples/cluster/README.md documents every command, flag and endpoint.

Scenario flags:
`)
	fs.PrintDefaults()
}

// helpMain prints the usage for `cluster help`.
func helpMain(stdout io.Writer) {
	fs := newFlagSet("cluster", stdout)
	demoFlags(fs, &options{})
	usage(fs)
}

// demoFlags declares the scenario flags on fs.
func demoFlags(fs *flag.FlagSet, o *options) {
	fs.StringVar(&o.scenario, "scenario", "paused", `the case to run; "list" lists them`)
	fs.BoolVar(&o.unfenced, "unfenced", false, "run the store without the epoch check (paused, gc-pause)")
	fs.BoolVar(&o.volatile, "volatile", false, "keep Raft's log and term in memory, not raft-boltdb (restart)")
	fs.BoolVar(&o.tx, "tx", false, "make the two-step write one sqlfence transaction (half-done)")
	fs.StringVar(&o.backend, "backend", "sqlite", "the store's storage: sqlite, bolt or postgres-trigger (needs -dsn) (paused)")
	fs.BoolVar(&o.apiOnly, "api-only", false, "fence only the store's API (pgfence.Tx), not the table: the batch job writes around it (every-write-path)")
	fs.StringVar(&o.dsn, "dsn", "", "PostgreSQL DSN for -backend postgres-trigger and every-write-path (default: $"+dsnEnv+")")
	fs.DurationVar(&o.hb, "heartbeat", 250*time.Millisecond, "Raft heartbeat and election timeout; the leader lease is half of it")
	fs.BoolVar(&o.verbose, "v", false, "log Raft and the store to stderr")
	fs.StringVar(&o.svg, "svg", "", "draw the run's timeline into this SVG file")
	fs.BoolVar(&o.lab, "lab", false, "run on \"three machines\": -scenario lab (Linux network namespaces; needs root and iproute2)")
}

// logger returns the run's logger (stderr with -v, else discarded).
func (o options) logOut(stderr io.Writer) io.Writer {
	if o.verbose {
		return stderr
	}
	return io.Discard
}

var errScenario = errors.New("scenario")

// failf is a scenario that could not run to its end (not an outcome: the
// summary reports outcomes).
func failf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errScenario, fmt.Sprintf(format, args...))
}
