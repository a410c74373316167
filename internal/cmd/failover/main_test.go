package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain also runs the node processes of -net netlab, which the tests
// start from this binary.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "-lab-node" {
		os.Exit(labNodeMain(os.Args[2:]))
	}
	goleak.VerifyTestMain(m)
}

func TestSummarize(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- { // 1..100 ms, unsorted
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	st := summarize(ds)
	want := stats{50 * time.Millisecond, 90 * time.Millisecond, 99 * time.Millisecond, 100 * time.Millisecond}
	if st != want {
		t.Fatalf("summarize(1..100 ms) = %+v, want %+v", st, want)
	}
	if ds[0] != 100*time.Millisecond {
		t.Fatal("summarize sorted its argument in place")
	}
	if st := summarize([]time.Duration{7}); st != (stats{7, 7, 7, 7}) {
		t.Fatalf("summarize of one sample = %+v", st)
	}
	if m := mean([]time.Duration{1, 2, 6}); m != 3 {
		t.Fatalf("mean = %v", m)
	}
}

// TestRunAllScenarios runs two rounds of every scenario on both systems and
// checks the report and the result file: a row per scenario and system,
// every sample a positive duration, at least one term per crash or kill,
// and termfence's win-to-confirmed figure.
func TestRunAllScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two three-node clusters")
	}
	ht := 100 * time.Millisecond
	p := params{
		rounds: 2, ht: ht, et: ht, llt: ht / 2, settleTimeout: 20 * time.Second,
		scenarios: []string{scCrash, scKilled, scHandover},
		jsonPath:  filepath.Join(t.TempDir(), "out.json"),
	}
	var out bytes.Buffer
	if err := run(p, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	text := out.String()
	for _, sc := range p.scenarios {
		for _, sys := range []string{"termfence", "hashicorp-raft"} {
			if !strings.Contains(text, sc+": "+sys) {
				t.Errorf("report has no %s row for %s:\n%s", sc, sys, text)
			}
		}
	}
	b, err := os.ReadFile(p.jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var f resultFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("result file: %v", err)
	}
	if f.Version != 1 || len(f.Results) != 6 {
		t.Fatalf("result file: version %d, %d results, want 1 and 6", f.Version, len(f.Results))
	}
	for _, r := range f.Results {
		if len(r.SamplesMS) != p.rounds {
			t.Errorf("%s %s: %d samples, want %d", r.System, r.Scenario, len(r.SamplesMS), p.rounds)
		}
		// A sample is a measured figure, not a verdict: on a loaded
		// machine it can take many heartbeats. It must be positive and
		// within the time the run waited for it.
		for _, s := range r.SamplesMS {
			if s <= 0 || s > ms(p.settleTimeout) {
				t.Errorf("%s %s: sample %v ms, want within (0, %v]", r.System, r.Scenario, s, p.settleTimeout)
			}
		}
		if r.Scenario != scHandover {
			tpf, err := strconv.ParseFloat(r.Params["terms_per_failover"], 64)
			if err != nil || tpf < 1 {
				t.Errorf("%s %s: terms per failover %q", r.System, r.Scenario, r.Params["terms_per_failover"])
			}
		}
		if r.System == "termfence" && r.Params["win_to_confirmed_p50"] == "" {
			t.Errorf("termfence %s: no raft win → confirmed figure", r.Scenario)
		}
	}
}
