package main

import (
	"bytes"
	"errors"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/termfence/termfence/perf/results"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func sample() []results.Result {
	return []results.Result{
		{System: results.SystemEtcd, Scenario: results.ScenarioCrash, LeaseTTLMS: 2000, SamplesMS: []float64{1800, 1500, 2400}},
		{System: results.SystemRaft, Scenario: results.ScenarioCrash, HeartbeatTimeoutMS: 100, SamplesMS: []float64{200, 180, 260}},
		{System: results.SystemTermfence, Scenario: results.ScenarioHandover, HeartbeatTimeoutMS: 100, SamplesMS: []float64{12.5}},
		{System: results.SystemTermfence, Scenario: results.ScenarioCrash, HeartbeatTimeoutMS: 100, SamplesMS: []float64{250, 210, 300}, Failures: 1},
		{System: results.SystemTermfence, Scenario: results.ScenarioCrash, HeartbeatTimeoutMS: 50, SamplesMS: []float64{120, 110}},
	}
}

func TestTable(t *testing.T) {
	got, err := table(sample())
	if err != nil {
		t.Fatal(err)
	}
	want := `| System | Scenario | Timing | n | p50 ms | p90 ms | p99 ms | max ms | p50 ÷ raw raft p50 |
|---|---|---|--:|--:|--:|--:|--:|--:|
| termfence | crash | HT 50ms | 2 | 110 | 120 | 120 | 120 | — |
| termfence | crash | HT 100ms | 3 (+1 failed) | 250 | 300 | 300 | 300 | 1.25 |
| hashicorp-raft | crash | HT 100ms | 3 | 200 | 260 | 260 | 260 | 1.00 |
| etcd | crash | TTL 2s | 3 | 1800 | 2400 | 2400 | 2400 | — |
| termfence | handover | HT 100ms | 1 | 12.5 | 12.5 | 12.5 | 12.5 | — |
`
	if got != want {
		t.Fatalf("table:\n%s\nwant:\n%s", got, want)
	}
}

// TestTableNetlabRows: rows measured with -net netlab are shown under
// their labels and divided by raw raft's netlab row, not the in-process one.
func TestTableNetlabRows(t *testing.T) {
	netlab := map[string]string{"net": "netlab"}
	rs := append(sample(),
		results.Result{System: results.SystemTermfence, Scenario: results.ScenarioCrash, HeartbeatTimeoutMS: 100,
			Label: "termfence (netlab)", Params: netlab, SamplesMS: []float64{120}},
		results.Result{System: results.SystemRaft, Scenario: results.ScenarioCrash, HeartbeatTimeoutMS: 100,
			Label: "hashicorp-raft (netlab)", Params: netlab, SamplesMS: []float64{240}},
	)
	got, err := table(rs)
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		"| termfence | crash | HT 100ms | 3 (+1 failed) | 250 | 300 | 300 | 300 | 1.25 |",
		"| termfence (netlab) | crash | HT 100ms | 1 | 120 | 120 | 120 | 120 | 0.50 |",
		"| hashicorp-raft (netlab) | crash | HT 100ms | 1 | 240 | 240 | 240 | 240 | 1.00 |",
	} {
		if !strings.Contains(got, row+"\n") {
			t.Errorf("table has no row %s:\n%s", row, got)
		}
	}
}

func TestDuplicateRefused(t *testing.T) {
	rs := append(sample(), results.Result{System: results.SystemRaft, Scenario: results.ScenarioCrash,
		HeartbeatTimeoutMS: 100, SamplesMS: []float64{1}})
	if _, err := table(rs); !errors.Is(err, errDuplicate) {
		t.Fatalf("table with a duplicate = %v, want errDuplicate", err)
	}
	if err := renderPNG(filepath.Join(t.TempDir(), "x.png"), rs); !errors.Is(err, errDuplicate) {
		t.Fatalf("renderPNG with a duplicate = %v, want errDuplicate", err)
	}
}

func TestECDF(t *testing.T) {
	pts := ecdf([]float64{30, 10, 20, 0})
	want := [][2]float64{{minPlotMS, 0}, {minPlotMS, 0.25}, {10, 0.5}, {20, 0.75}, {30, 1}}
	if len(pts) != len(want) {
		t.Fatalf("%d points, want %d", len(pts), len(want))
	}
	for i, w := range want {
		if pts[i].X != w[0] || pts[i].Y != w[1] {
			t.Errorf("point %d = (%v, %v), want (%v, %v)", i, pts[i].X, pts[i].Y, w[0], w[1])
		}
	}
}

// TestRunEndToEnd reads two result files and writes a PNG with one panel per
// scenario.
func TestRunEndToEnd(t *testing.T) {
	dir := t.TempDir()
	rs := sample()
	a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	if err := results.WriteFile(a, results.File{Version: results.Version, Results: rs[:2]}); err != nil {
		t.Fatal(err)
	}
	if err := results.WriteFile(b, results.File{Version: results.Version, Results: rs[2:]}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "plot.png")
	var stdout bytes.Buffer
	if err := run([]string{"-png", out, a, b}, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(stdout.String(), "\n"); n != 2+len(rs) {
		t.Fatalf("table has %d lines, want %d:\n%s", n, 2+len(rs), stdout.String())
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	// Two scenarios, two stacked panels: taller than one panel.
	if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < 2*b.Dx()/3-10 {
		t.Fatalf("image is %dx%d, want two panels at least 1000 px wide", b.Dx(), b.Dy())
	}
}

func TestRunRefuses(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"version":1,"results":[{"system":"x","scenario":"y","samples":[1]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{nil, {bad}, {filepath.Join(dir, "missing.json")}} {
		if err := run(args, io.Discard, io.Discard); err == nil {
			t.Errorf("run(%q) succeeded", args)
		}
	}
	if err := run([]string{bad}, io.Discard, io.Discard); !errors.Is(err, results.ErrInvalid) {
		t.Errorf("bad file: %v, want results.ErrInvalid", err)
	}
}
