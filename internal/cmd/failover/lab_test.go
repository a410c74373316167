//go:build linux

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

	"github.com/termfence/termfence/internal/netlab/netlabtest"
)

// TestRunNetlab runs two rounds of every scenario with each node a process
// in a lab host and checks the report and the result file as
// TestRunAllScenarios does, plus the netlab labels and parameters, that
// the crash's fault (one netlink request) was timed, and that the lab is
// gone afterwards.
func TestRunNetlab(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six node processes")
	}
	netlabtest.Require(t)
	ht := 100 * time.Millisecond
	p := params{
		net: netLab, rounds: 2, ht: ht, et: ht, llt: ht / 2, settleTimeout: 30 * time.Second,
		scenarios: []string{scCrash, scKilled, scHandover},
		jsonPath:  filepath.Join(t.TempDir(), "out.json"),
	}
	before := labsOf(t, os.Getpid())
	var out bytes.Buffer
	if err := run(p, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	text := out.String()
	t.Log("\n" + text)
	for _, sc := range p.scenarios {
		for _, sys := range []string{"termfence (netlab)", "hashicorp-raft (netlab)"} {
			if !strings.Contains(text, sc+": "+sys) {
				t.Errorf("report has no %s row for %s", sc, sys)
			}
		}
	}
	if !strings.Contains(text, "isolating the host took") {
		t.Errorf("report does not say how long isolating a host took")
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
		if r.Label != r.System+" (netlab)" || r.Params["net"] != "netlab" || !strings.Contains(r.Params["transport"], "netlab") {
			t.Errorf("%s %s: label %q, params %v: not marked as netlab", r.System, r.Scenario, r.Label, r.Params)
		}
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
	if after := labsOf(t, os.Getpid()); len(after) != len(before) {
		t.Errorf("the run left lab namespaces: %q", after)
	}
}

// labsOf lists the namespaces of labs made by pid.
func labsOf(t *testing.T, pid int) []string {
	t.Helper()
	ents, _ := os.ReadDir("/run/netns")
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "tfl-"+strconv.Itoa(pid)+"-") {
			out = append(out, e.Name())
		}
	}
	return out
}
