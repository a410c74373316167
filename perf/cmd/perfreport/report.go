package main

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/termfence/termfence/perf/results"
)

// errDuplicate is returned, wrapped, when two results describe the same
// measurement.
var errDuplicate = errors.New("perfreport: duplicate result")

// order sorts results the way the table and the plot show them.
func order(rs []results.Result) ([]results.Result, error) {
	out := slices.Clone(rs)
	slices.SortStableFunc(out, func(a, b results.Result) int {
		return cmp.Or(
			cmp.Compare(rank(a.Scenario, results.ScenarioCrash, results.ScenarioHandover),
				rank(b.Scenario, results.ScenarioCrash, results.ScenarioHandover)),
			cmp.Compare(a.Scenario, b.Scenario),
			cmp.Compare(rank(a.System, results.SystemTermfence, results.SystemRaft, results.SystemEtcd),
				rank(b.System, results.SystemTermfence, results.SystemRaft, results.SystemEtcd)),
			cmp.Compare(a.System, b.System),
			cmp.Compare(a.HeartbeatTimeoutMS, b.HeartbeatTimeoutMS),
			cmp.Compare(a.LeaseTTLMS, b.LeaseTTLMS),
			cmp.Compare(a.Label, b.Label),
		)
	})
	for i := 1; i < len(out); i++ {
		a, b := out[i-1], out[i]
		if a.System == b.System && a.Scenario == b.Scenario && a.HeartbeatTimeoutMS == b.HeartbeatTimeoutMS &&
			a.LeaseTTLMS == b.LeaseTTLMS && a.Label == b.Label {
			return nil, fmt.Errorf("%w: %s appears twice", errDuplicate, a.Name())
		}
	}
	return out, nil
}

// rank is the index of s in known, or len(known) for anything else.
func rank(s string, known ...string) int {
	if i := slices.Index(known, s); i >= 0 {
		return i
	}
	return len(known)
}

// baseline finds raw raft's result for r's scenario and heartbeat timeout
// measured on the same network (params "net": empty for the in-process
// runs, "netlab" for a process per node in network namespaces). Of the
// in-process runs only the unlabelled raw row is a baseline.
func baseline(rs []results.Result, r results.Result) (results.Result, bool) {
	if r.HeartbeatTimeoutMS == 0 {
		return results.Result{}, false
	}
	net := r.Params["net"]
	for _, b := range rs {
		if b.System == results.SystemRaft && (b.Label == "" || net != "") && b.Params["net"] == net &&
			b.Scenario == r.Scenario && b.HeartbeatTimeoutMS == r.HeartbeatTimeoutMS {
			return b, true
		}
	}
	return results.Result{}, false
}

// table renders rs as a markdown table.
func table(rs []results.Result) (string, error) {
	rs, err := order(rs)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("| System | Scenario | Timing | n | p50 ms | p90 ms | p99 ms | max ms | p50 ÷ raw raft p50 |\n")
	b.WriteString("|---|---|---|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range rs {
		s := results.Summarize(r.SamplesMS)
		system := r.System
		if r.Label != "" {
			system = r.Label
		}
		timing := r.Timing()
		if timing == "" {
			timing = "—"
		}
		n := fmt.Sprint(s.N)
		if r.Failures > 0 {
			n += fmt.Sprintf(" (+%d failed)", r.Failures)
		}
		ratio := "—"
		if base, ok := baseline(rs, r); ok {
			if p := results.Summarize(base.SamplesMS).P50; p > 0 {
				ratio = fmt.Sprintf("%.2f", s.P50/p)
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			system, r.Scenario, timing, n, msText(s.P50), msText(s.P90), msText(s.P99), msText(s.Max), ratio)
	}
	return b.String(), nil
}

// msText prints milliseconds with one decimal below 100 ms, none above.
func msText(v float64) string {
	if v < 100 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}
