package results_test

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/termfence/termfence/perf/results"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func valid() results.File {
	return results.File{
		Version: results.Version,
		Results: []results.Result{{
			System:             results.SystemTermfence,
			Scenario:           results.ScenarioCrash,
			HeartbeatTimeoutMS: 100,
			SamplesMS:          []float64{201.5, 187.25, 240},
			Nodes:              3,
			Params:             map[string]string{"store": "bolt"},
			Host:               "linux/amd64 2 CPU",
			Started:            time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC),
		}},
	}
}

func TestRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.json")
	want := valid()
	if err := results.WriteFile(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := results.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
	// No temporary file is left beside it.
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want only the result file", len(entries))
	}
}

func TestDecodeRefuses(t *testing.T) {
	cases := map[string]string{
		"unknown field":   `{"version":1,"results":[{"system":"a","scenario":"b","heartbeat_timeout_ms":1,"samples":[1]}]}`,
		"other version":   `{"version":2,"results":[{"system":"a","scenario":"b","heartbeat_timeout_ms":1,"samples_ms":[1]}]}`,
		"no version":      `{"results":[{"system":"a","scenario":"b","heartbeat_timeout_ms":1,"samples_ms":[1]}]}`,
		"no results":      `{"version":1,"results":[]}`,
		"no samples":      `{"version":1,"results":[{"system":"a","scenario":"b","heartbeat_timeout_ms":1,"samples_ms":[]}]}`,
		"negative sample": `{"version":1,"results":[{"system":"a","scenario":"b","heartbeat_timeout_ms":1,"samples_ms":[1,-2]}]}`,
		"negative HT":     `{"version":1,"results":[{"system":"a","scenario":"b","heartbeat_timeout_ms":-1,"samples_ms":[1]}]}`,
		"empty system":    `{"version":1,"results":[{"system":" ","scenario":"b","samples_ms":[1]}]}`,
		"empty scenario":  `{"version":1,"results":[{"system":"a","scenario":"","samples_ms":[1]}]}`,
		"trailing data":   `{"version":1,"results":[{"system":"a","scenario":"b","samples_ms":[1]}]} {}`,
		"not JSON":        `system,scenario`,
		"bare array":      `[{"system":"a","scenario":"b","samples_ms":[1]}]`,
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := results.Decode(strings.NewReader(in))
			if !errors.Is(err, results.ErrInvalid) {
				t.Fatalf("Decode(%s) = %v, want ErrInvalid", in, err)
			}
		})
	}
}

func TestEncodeRefusesNaN(t *testing.T) {
	f := valid()
	f.Results[0].SamplesMS = []float64{1, math.NaN()}
	var buf bytes.Buffer
	if err := results.Encode(&buf, f); !errors.Is(err, results.ErrInvalid) {
		t.Fatalf("Encode with NaN = %v, want ErrInvalid", err)
	}
	if buf.Len() != 0 {
		t.Fatalf("Encode wrote %d bytes for an invalid file", buf.Len())
	}
	path := filepath.Join(t.TempDir(), "r.json")
	if err := results.WriteFile(path, f); !errors.Is(err, results.ErrInvalid) {
		t.Fatalf("WriteFile with NaN = %v, want ErrInvalid", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("WriteFile created the file for an invalid result: %v", err)
	}
}

func TestQuantileNearestRank(t *testing.T) {
	// 1..20 shuffled: nearest rank gives p50 = 10, p90 = 18, p99 = 20.
	s := []float64{7, 3, 20, 1, 14, 9, 18, 2, 11, 5, 16, 8, 19, 4, 13, 6, 17, 10, 15, 12}
	orig := append([]float64(nil), s...)
	cases := []struct{ p, want float64 }{
		{50, 10}, {90, 18}, {99, 20}, {100, 20}, {5, 1}, {0, 1}, {-3, 1}, {150, 20}, {51, 11},
	}
	for _, c := range cases {
		if got := results.Quantile(s, c.p); got != c.want {
			t.Errorf("Quantile(p%v) = %v, want %v", c.p, got, c.want)
		}
	}
	if !reflect.DeepEqual(s, orig) {
		t.Fatal("Quantile reordered its input")
	}
	if !math.IsNaN(results.Quantile(nil, 50)) {
		t.Fatal("Quantile(nil) is not NaN")
	}
	sum := results.Summarize(s)
	want := results.Summary{N: 20, Min: 1, P50: 10, P90: 18, P99: 20, Max: 20, Mean: 10.5}
	if sum != want {
		t.Fatalf("Summarize = %+v, want %+v", sum, want)
	}
	if !reflect.DeepEqual(s, orig) {
		t.Fatal("Summarize reordered its input")
	}
	if got := results.Summarize(nil); got != (results.Summary{}) {
		t.Fatalf("Summarize(nil) = %+v", got)
	}
}

func TestName(t *testing.T) {
	cases := []struct {
		r    results.Result
		want string
	}{
		{results.Result{System: "termfence", Scenario: "crash", HeartbeatTimeoutMS: 100}, "termfence crash HT 100ms"},
		{results.Result{System: "etcd", Scenario: "crash", LeaseTTLMS: 2000}, "etcd crash TTL 2s"},
		{results.Result{System: "x", Scenario: "y"}, "x y"},
		{results.Result{System: "x", Scenario: "y", HeartbeatTimeoutMS: 50, Label: "custom"}, "custom"},
	}
	for _, c := range cases {
		if got := c.r.Name(); got != c.want {
			t.Errorf("Name() = %q, want %q", got, c.want)
		}
	}
}
