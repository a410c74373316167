package main

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/internal/netlab/netlabtest"
)

// runCluster runs the example binary with args and returns its output lines
// and exit code.
func runCluster(t *testing.T, args ...string) ([]string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(90 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("cluster %v did not finish in 90s; output:\n%s", args, out.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(out.String(), "\n"), "\n"), code
}

// runScenario runs one scenario, requires exit code 0 and a well-formed
// summary as the last line, and returns the summary's fields and the whole
// output.
func runScenario(t *testing.T, args ...string) (map[string]string, string) {
	t.Helper()
	lines, code := runCluster(t, args...)
	out := strings.Join(lines, "\n")
	if code != 0 {
		t.Fatalf("cluster %v exited %d (want 0); output:\n%s", args, code, out)
	}
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "summary: scenario=") {
		t.Fatalf("last line is not a summary: %q; output:\n%s", last, out)
	}
	f := strings.Fields(strings.TrimPrefix(last, "summary: "))
	if !strings.HasPrefix(f[len(f)-1], "ok=") {
		t.Fatalf("the summary does not end with ok=: %q", last)
	}
	m := map[string]string{}
	for _, kv := range f {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("summary field %q is not k=v in %q", kv, last)
		}
		m[k] = v
	}
	return m, out
}

func epochOf(t *testing.T, m map[string]string, k string) epoch.Epoch {
	t.Helper()
	e, err := epoch.Parse(m[k])
	if err != nil {
		t.Fatalf("summary %s=%q: %v", k, m[k], err)
	}
	return e
}

func num(t *testing.T, m map[string]string, k string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSuffix(m[k], "ms"))
	if err != nil {
		t.Fatalf("summary %s=%q is not a number", k, m[k])
	}
	return n
}

// testScenarioHeartbeat gives the scenarios' clusters room on a loaded
// machine running the race detector: a follower calls an election only
// after this long without a heartbeat.
const testScenarioHeartbeat = "-heartbeat=400ms"

// TestScenarios runs every scenario of the table (and its variants) on the
// real cluster and checks its summary: the numbers each case of the essay
// must show.
func TestScenarios(t *testing.T) {
	type want map[string]string
	cases := []struct {
		name string
		args []string
		want want
		// check holds further relations between the summary's fields.
		check func(t *testing.T, m map[string]string, out string)
	}{
		{"paused", []string{"-scenario", "paused"}, want{"fenced": "true", "refused": "1", "lost": "0", "data": "[v0,B]", "ok": "true"},
			func(t *testing.T, m map[string]string, out string) {
				// The refusal names A's pre-pause epoch and B's.
				checkAB("presented "+m["epochA"]+", highest "+m["epochB"])(t, m, out)
				checkAB("with the token it took before the pause ("+m["epochA"]+")")(t, m, out)
			}},
		{"paused-unfenced", []string{"-scenario", "paused", "-unfenced"}, want{"fenced": "false", "refused": "0", "lost": "1", "data": "[v0,A]", "ok": "false"}, checkAB("B's update is LOST")},
		{"paused-bolt", []string{"-scenario", "paused", "-backend", "bolt"}, want{"fenced": "true", "refused": "1", "lost": "0", "ok": "true"}, checkAB("")},
		{"short-pause", []string{"-scenario", "short-pause", "-heartbeat=1s"}, want{"elections": "0", "fenced_refused": "0", "unfenced_refused": "0", "fenced": "[v0,A]", "unfenced": "[v0,A]", "same": "true", "ok": "true"},
			func(t *testing.T, m map[string]string, out string) {
				if num(t, m, "pause") >= num(t, m, "lease") {
					t.Errorf("pause %s is not shorter than the lease %s", m["pause"], m["lease"])
				}
				if !strings.Contains(out, "proves nothing about safety") {
					t.Errorf("the output does not say why this proves nothing")
				}
			}},
		{"audit-log", []string{"-scenario", "audit-log"}, want{"store_refused": "1", "lost": "0", "data": "[v0,B]", "audit_entries": "3", "audit_lies": "1", "ok": "false"}, checkAB("the log lies")},
		{"restart", []string{"-scenario", "restart"}, want{"volatile": "false", "refused": "0", "ok": "true"},
			func(t *testing.T, m map[string]string, out string) {
				if num(t, m, "term_after") <= num(t, m, "term_before") {
					t.Errorf("after a durable restart term %s is not above %s", m["term_after"], m["term_before"])
				}
			}},
		{"restart-volatile", []string{"-scenario", "restart", "-volatile"}, want{"volatile": "true", "refused": "1", "ok": "false"},
			func(t *testing.T, m map[string]string, out string) {
				if num(t, m, "term_after") > num(t, m, "term_before") {
					t.Errorf("after a volatile restart term %s is above %s: the counter did not go back", m["term_after"], m["term_before"])
				}
				if !strings.Contains(out, "durable consensus") {
					t.Errorf("the output does not say where the counter must live")
				}
			}},
		{"two-resources", []string{"-scenario", "two-resources"}, want{"db_refused": "1", "objects_refused": "0", "objects_stale": "1", "db": "[v0,B]", "objects": "[v0,A]", "partial": "1", "ok": "false"}, checkAB("")},
		{"half-done", []string{"-scenario", "half-done"}, want{"tx": "false", "a_steps": "1", "b_steps": "2", "half_done": "1", "ok": "false"}, checkAB("it did not undo")},
		{"half-done-tx", []string{"-scenario", "half-done", "-tx"}, want{"tx": "true", "a_steps": "0", "b_steps": "2", "half_done": "0", "ok": "true"}, checkAB("REFUSED")},
		{"stale-read", []string{"-scenario", "stale-read"}, want{"check_passed": "1", "stale_used": "1", "plain_read_served": "1", "check_refused": "1", "ok": "false"}, checkAB("stale by the time")},
		{"efficiency", []string{"-scenario", "efficiency"}, want{"runs": "2", "mails": "2", "duplicates": "1", "corrupt": "0", "ok": "true"}, nil},
		{"gc-pause", []string{"-scenario", "gc-pause"}, want{"fenced": "true", "refused": "1", "late_accepted": "0", "lost": "0", "ok": "true"},
			func(t *testing.T, m map[string]string, out string) {
				checkAB("kill -STOP "+m["pidA"])(t, m, out)
				if num(t, m, "pause") <= num(t, m, "lease") {
					t.Errorf("the SIGSTOP (%s) did not outlast the lease (%s)", m["pause"], m["lease"])
				}
			}},
		// PostgreSQL (skipped without TERMFENCE_POSTGRES_DSN).
		{"every-write-path", []string{"-scenario", "every-write-path"}, want{"guarded": "true", "api_refused": "1", "batch_current_accepted": "1", "batch_stale_landed": "0", "batch_refused": "2", "batch_codes": "TF001,TF006", "lost": "0", "data": "[v0,B]", "ok": "true"},
			func(t *testing.T, m map[string]string, out string) {
				checkAB("REFUSED by the database (SQLSTATE TF006: termfence: stale epoch for \"cluster_records\": presented "+m["epochA"]+", highest "+m["epochB"])(t, m, out)
			}},
		{"every-write-path-api-only", []string{"-scenario", "every-write-path", "-api-only"}, want{"guarded": "false", "api_refused": "1", "batch_current_accepted": "1", "batch_stale_landed": "2", "batch_refused": "0", "batch_codes": "none", "lost": "1", "data": "[v0,A,batch]", "ok": "false"}, checkAB("the API was fenced, the batch job was not")},
		{"paused-postgres-trigger", []string{"-scenario", "paused", "-backend", "postgres-trigger"}, want{"fenced": "true", "refused": "1", "lost": "0", "data": "[v0,B]", "ok": "true"}, checkAB("(SQLSTATE TF006)")},
		// An S3 object store (versitygw; skipped, saying so, without it).
		{"object-store", []string{"-scenario", "object-store"}, want{"fenced": "true", "refused": "1", "lost": "0", "data": "[v0,B]", "ok": "true"}, checkAB("the store answers 412; objectfence reads again: REFUSED")},
		{"object-store-unfenced", []string{"-scenario", "object-store", "-unfenced"}, want{"fenced": "false", "refused": "0", "lost": "1", "data": "[v0,A]", "ok": "false"}, checkAB("B's update is LOST")},
		// Redis with the fence library inside it (skipped, saying so,
		// without redis-server).
		{"redis", []string{"-scenario", "redis"}, want{"fenced": "true", "refused": "1", "forged_refused": "1", "lost": "0", "data": "[v0,B]", "ok": "true"}, checkAB("REFUSED by Redis itself")},
		{"redis-unfenced", []string{"-scenario", "redis", "-unfenced"}, want{"fenced": "false", "refused": "0", "lost": "1", "data": "[v0,A]", "ok": "false"}, checkAB("B's update is LOST")},
		// Named roles on one group: every role of the frozen owner moves,
		// its late writes under the old grants are all refused, and no
		// role's resource loses its new owner's write.
		{"roles", []string{"-scenario", "roles"}, want{"roles": "12", "late_accepted": "0", "lost": "0", "ok": "true"},
			func(t *testing.T, m map[string]string, out string) {
				if moved, refused := num(t, m, "moved"), num(t, m, "refused"); moved < 2 || refused < moved {
					t.Errorf("moved=%d refused=%d: want several roles moved and a refusal for each", moved, refused)
				}
			}},
		// The lab scenario (needs root: skipped otherwise); the fenced run
		// is TestLabCommand's, through -lab.
		{"lab-unfenced", []string{"-scenario", "lab", "-unfenced"}, want{"fenced": "false", "refused_paused": "0", "refused_partitioned": "0", "lost": "2", "ok": "false"},
			func(t *testing.T, m map[string]string, out string) {
				checkAB("B's update is LOST")(t, m, out)
				if !strings.Contains(out, "C's update is LOST") {
					t.Errorf("the output does not say the partitioned leader's late write overwrote C's")
				}
			}},
	}
	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.args[1]] = true
	}
	for _, s := range scenarios {
		if !covered[s.name] {
			t.Errorf("scenario %s has no case in TestScenarios", s.name)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if slices.Contains(c.args, "every-write-path") || slices.Contains(c.args, "postgres-trigger") {
				needPostgres(t)
			}
			if c.args[1] == "lab" {
				netlabtest.Require(t)
			}
			if c.args[1] == "object-store" {
				needVersitygw(t)
			}
			if c.args[1] == "redis" {
				needRedis(t)
			}
			args := append([]string{testScenarioHeartbeat}, c.args...)
			m, out := runScenario(t, args...)
			if m["scenario"] != c.args[1] {
				t.Errorf("scenario=%s, want %s", m["scenario"], c.args[1])
			}
			for k, v := range c.want {
				if m[k] != v {
					t.Errorf("%s=%q, want %q", k, m[k], v)
				}
			}
			if c.check != nil {
				c.check(t, m, out)
			}
			if t.Failed() {
				t.Logf("output:\n%s", out)
			}
		})
	}
}

// checkAB checks that A and B are two nodes, each named in its own epoch,
// B's term above A's, and that the output contains text.
func checkAB(text string) func(t *testing.T, m map[string]string, out string) {
	return func(t *testing.T, m map[string]string, out string) {
		t.Helper()
		a, b := epochOf(t, m, "epochA"), epochOf(t, m, "epochB")
		if a.Leader != m["A"] || b.Leader != m["B"] || m["A"] == m["B"] {
			t.Errorf("A=%s (%s), B=%s (%s): want two different nodes, each named in its own epoch", m["A"], a, m["B"], b)
		}
		if b.Term <= a.Term {
			t.Errorf("B's term %d is not above A's %d", b.Term, a.Term)
		}
		if text != "" && !strings.Contains(out, text) {
			t.Errorf("the output lacks %q", text)
		}
	}
}

// TestScenarioSVG runs the paused scenario with -svg and checks that the
// picture is well-formed XML and holds the run's events where they
// happened: A's election and epoch at its term, the pause on A's lane, B's
// election, B's accepted write, and A's refused write at A's (older) term.
func TestScenarioSVG(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "run.svg")
	m, out := runScenario(t, testScenarioHeartbeat, "-scenario", "paused", "-svg", file)
	a, b := epochOf(t, m, "epochA"), epochOf(t, m, "epochB")
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type el struct{ kind, term, lane, to string }
	var els []el
	dec := xml.NewDecoder(f)
	root := ""
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v", err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		if root == "" {
			root = se.Name.Space + " " + se.Name.Local
		}
		var e el
		for _, at := range se.Attr {
			switch at.Name.Local {
			case "data-kind":
				e.kind = at.Value
			case "data-term":
				e.term = at.Value
			case "data-lane":
				e.lane = at.Value
			case "data-to":
				e.to = at.Value
			}
		}
		if e.kind != "" {
			els = append(els, e)
		}
	}
	if root != "http://www.w3.org/2000/svg svg" {
		t.Errorf("root element %q, want svg in the SVG namespace", root)
	}
	ta, tb := strconv.FormatUint(a.Term, 10), strconv.FormatUint(b.Term, 10)
	for _, w := range []el{
		{evElected, ta, a.Leader, ""},
		{spanEpoch, ta, a.Leader, ""},
		{spanPause, ta, a.Leader, ""},
		{evElected, tb, b.Leader, ""},
		{evAccepted, tb, b.Leader, "store"},
		{evRefused, ta, a.Leader, "store"},
	} {
		if !slices.Contains(els, w) {
			t.Errorf("the SVG has no %s element for term %s on lane %s (to %q); it has %v", w.kind, w.term, w.lane, w.to, els)
		}
	}
	for _, e := range els {
		if e.kind == evRefused && e.term != ta {
			t.Errorf("the SVG shows a refused write at term %s; the run refused only A's, at term %s", e.term, ta)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

// TestScenarioList: -scenario list prints one line per scenario of the
// table, each starting with its name; an unknown scenario and a variant
// flag the scenario does not use are refused with exit code 2.
func TestScenarioList(t *testing.T) {
	t.Parallel()
	lines, code := runCluster(t, "-scenario", "list")
	if code != 0 {
		t.Fatalf("-scenario list exited %d", code)
	}
	if len(lines) != len(scenarios) {
		t.Errorf("-scenario list printed %d lines for %d scenarios:\n%s", len(lines), len(scenarios), strings.Join(lines, "\n"))
	}
	for _, want := range []string{"paused", "short-pause", "audit-log", "restart", "two-resources", "half-done", "stale-read", "efficiency", "gc-pause", "lab", "roles", "every-write-path"} {
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, want+" ") }) {
			t.Errorf("-scenario list lacks %s:\n%s", want, strings.Join(lines, "\n"))
		}
	}
	for _, args := range [][]string{{"-scenario", "nope"}, {"-scenario", "audit-log", "-volatile"}, {"-scenario", "paused", "-tx"}, {"-lab", "-scenario", "paused"}, {"-scenario", "paused", "-api-only"}} {
		lines, code := runCluster(t, args...)
		if code != 2 {
			t.Errorf("cluster %v exited %d, want 2:\n%s", args, code, strings.Join(lines, "\n"))
		}
	}
}
