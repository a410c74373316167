package results

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Version is the only file format version this package reads and writes.
const Version = 1

// System names used by termfence's own producers. Other systems may use any
// non-empty name; these are the ones perfreport treats specially.
const (
	// SystemTermfence is package election: time until another node holds a
	// confirmed epoch.
	SystemTermfence = "termfence"
	// SystemRaft is raw hashicorp/raft: time until another node is Leader.
	// It is the baseline the report divides by.
	SystemRaft = "hashicorp-raft"
	// SystemEtcd is etcd's client/v3/concurrency.Election against an embedded
	// etcd server: time until another client's Campaign returns.
	SystemEtcd = "etcd"
)

// Scenario names used by termfence's own producers.
const (
	// ScenarioCrash: the leader process dies without handing over.
	ScenarioCrash = "crash"
	// ScenarioHandover: the leader hands over on purpose (resign, transfer).
	ScenarioHandover = "handover"
)

// ErrInvalid is returned, wrapped, for a file or result that breaks the format.
var ErrInvalid = errors.New("results: invalid result file")

// File is the whole content of a result file.
type File struct {
	// Version must be Version.
	Version int `json:"version"`
	// Results holds one entry per (system, scenario, timing) measured.
	Results []Result `json:"results"`
}

// Result is one measured distribution.
type Result struct {
	// System names what was measured, e.g. SystemTermfence. Required.
	System string `json:"system"`
	// Scenario names the fault, e.g. ScenarioCrash. Required.
	Scenario string `json:"scenario"`
	// HeartbeatTimeoutMS is the Raft HeartbeatTimeout in milliseconds; 0 when
	// the system has none (etcd's lease-based election).
	HeartbeatTimeoutMS float64 `json:"heartbeat_timeout_ms"`
	// LeaseTTLMS is the lease TTL in milliseconds that the server granted, for
	// lease-based systems; 0 when not applicable.
	LeaseTTLMS float64 `json:"lease_ttl_ms,omitempty"`
	// SamplesMS holds one failover time per round, in milliseconds, in the
	// order measured. At least one.
	SamplesMS []float64 `json:"samples_ms"`
	// Failures counts rounds that did not fail over before the producer's
	// deadline; they are not in SamplesMS.
	Failures int `json:"failures,omitempty"`
	// Nodes is the number of participants (Raft servers, etcd clients).
	Nodes int `json:"nodes,omitempty"`
	// Label overrides the name shown in tables and plots; empty: derived.
	Label string `json:"label,omitempty"`
	// Params records any other setting that shaped the result, free-form.
	Params map[string]string `json:"params,omitempty"`
	// Host describes the machine, e.g. "linux/amd64 2 CPU go1.26.8".
	Host string `json:"host,omitempty"`
	// Started is when the measurement began.
	Started time.Time `json:"started,omitzero"`
}

// Validate reports whether r is well formed. The error wraps ErrInvalid.
func (r Result) Validate() error {
	switch {
	case strings.TrimSpace(r.System) == "":
		return fmt.Errorf("%w: empty system", ErrInvalid)
	case strings.TrimSpace(r.Scenario) == "":
		return fmt.Errorf("%w: %s: empty scenario", ErrInvalid, r.System)
	case !finiteNonNeg(r.HeartbeatTimeoutMS):
		return fmt.Errorf("%w: %s/%s: heartbeat_timeout_ms %v", ErrInvalid, r.System, r.Scenario, r.HeartbeatTimeoutMS)
	case !finiteNonNeg(r.LeaseTTLMS):
		return fmt.Errorf("%w: %s/%s: lease_ttl_ms %v", ErrInvalid, r.System, r.Scenario, r.LeaseTTLMS)
	case len(r.SamplesMS) == 0:
		return fmt.Errorf("%w: %s/%s: no samples", ErrInvalid, r.System, r.Scenario)
	case r.Failures < 0 || r.Nodes < 0:
		return fmt.Errorf("%w: %s/%s: negative failures or nodes", ErrInvalid, r.System, r.Scenario)
	}
	for i, s := range r.SamplesMS {
		if !finiteNonNeg(s) {
			return fmt.Errorf("%w: %s/%s: samples_ms[%d] = %v", ErrInvalid, r.System, r.Scenario, i, s)
		}
	}
	return nil
}

func finiteNonNeg(v float64) bool { return v >= 0 && !math.IsInf(v, 0) && !math.IsNaN(v) }

// Name is the label for tables and plots: Label if set, else system, scenario
// and timing, e.g. "termfence crash HT 100ms" or "etcd crash TTL 2s".
func (r Result) Name() string {
	if r.Label != "" {
		return r.Label
	}
	s := r.System + " " + r.Scenario
	if t := r.Timing(); t != "" {
		s += " " + t
	}
	return s
}

// Timing is the timing setting in words: "HT 100ms", "TTL 2s", both, or "".
func (r Result) Timing() string {
	var parts []string
	if r.HeartbeatTimeoutMS > 0 {
		parts = append(parts, "HT "+ms(r.HeartbeatTimeoutMS))
	}
	if r.LeaseTTLMS > 0 {
		parts = append(parts, "TTL "+ms(r.LeaseTTLMS))
	}
	return strings.Join(parts, ", ")
}

func ms(v float64) string {
	return time.Duration(v * float64(time.Millisecond)).String()
}

// Validate reports whether f is a well-formed file of this Version.
func (f File) Validate() error {
	if f.Version != Version {
		return fmt.Errorf("%w: version %d, want %d", ErrInvalid, f.Version, Version)
	}
	if len(f.Results) == 0 {
		return fmt.Errorf("%w: no results", ErrInvalid)
	}
	for _, r := range f.Results {
		if err := r.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// Decode reads one File from r and validates it. Unknown fields and trailing
// data are errors.
func Decode(r io.Reader) (File, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var f File
	if err := dec.Decode(&f); err != nil {
		return File{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return File{}, fmt.Errorf("%w: trailing data after the object", ErrInvalid)
	}
	if err := f.Validate(); err != nil {
		return File{}, err
	}
	return f, nil
}

// Encode validates f and writes it to w as indented JSON.
func Encode(w io.Writer, f File) error {
	if err := f.Validate(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("results: encode: %w", err)
	}
	b = append(b, '\n')
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("results: write: %w", err)
	}
	return nil
}

// ReadFile decodes the file at path.
func ReadFile(path string) (File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return File{}, fmt.Errorf("results: %w", err)
	}
	f, err := Decode(bytes.NewReader(b))
	if err != nil {
		return File{}, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// WriteFile validates f and replaces path with it atomically: a reader sees the
// old file or the whole new one, never a torn one.
func WriteFile(path string, f File) (err error) {
	var buf bytes.Buffer
	if err := Encode(&buf, f); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("results: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("results: %w", err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("results: %w", err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("results: %w", err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("results: %w", err)
	}
	return nil
}

// Summary is the order statistics of one Result, in milliseconds.
type Summary struct {
	N                       int
	Min, P50, P90, P99, Max float64
	Mean                    float64
}

// Summarize computes the order statistics of samples with the nearest-rank method. It
// does not modify samples. An empty sample list gives the zero Summary.
func Summarize(samples []float64) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	var sum float64
	for _, v := range s {
		sum += v
	}
	return Summary{
		N:    len(s),
		Min:  s[0],
		P50:  quantile(s, 50),
		P90:  quantile(s, 90),
		P99:  quantile(s, 99),
		Max:  s[len(s)-1],
		Mean: sum / float64(len(s)),
	}
}

// Quantile returns the p-th percentile (0 < p <= 100) of samples by the
// nearest-rank method: the smallest sample with at least p% of the samples at
// or below it. p outside (0, 100] is clamped to it; an empty slice gives NaN.
func Quantile(samples []float64, p float64) float64 {
	if len(samples) == 0 {
		return math.NaN()
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	return quantile(s, p)
}

// quantile is Quantile on sorted, non-empty s.
func quantile(s []float64, p float64) float64 {
	p = min(max(p, 0), 100)
	rank := int(math.Ceil(p * float64(len(s)) / 100)) // p*n first: exact for integer p and n
	return s[min(max(rank, 1), len(s))-1]
}
