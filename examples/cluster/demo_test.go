package main

import (
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// summaryRE parses the demo's last line.
var summaryRE = regexp.MustCompile(`^summary: fenced=(\w+) A=(\S+) epochA=demo/(\d+)/(\S+) B=(\S+) epochB=demo/(\d+)/(\S+) pause=(\d+)ms refused=(\d+) lost=(\d+) data=\[([^\]]*)\]`)

// runDemo runs the demo binary and returns its output lines and the parsed
// summary.
func runDemo(t *testing.T, args ...string) ([]string, []string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	done := make(chan struct{})
	var out []byte
	var err error
	go func() {
		out, err = cmd.CombinedOutput()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("demo %v did not finish in 60s; output:\n%s", args, out)
	}
	if err != nil {
		t.Fatalf("demo %v: %v (exit code must be 0); output:\n%s", args, err, out)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	last := lines[len(lines)-1]
	m := summaryRE.FindStringSubmatch(last)
	if m == nil {
		t.Fatalf("last line is not a well-formed summary: %q; output:\n%s", last, out)
	}
	return lines, m
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDemo runs the seed's scenario on a real cluster, fenced and unfenced:
// fenced, A's late write (with its pre-pause token) is refused and B's
// update survives; unfenced, A's write lands and B's update is lost.
func TestDemo(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		fenced  bool
		refused int
		lost    int
		data    string
		verdict string
	}{
		{"fenced", nil, true, 1, 0, "v0 B", "B's update survives"},
		{"unfenced", []string{"-unfenced"}, false, 0, 1, "v0 A", "B's update is LOST"},
		{"fenced-bolt", []string{"-backend", "bolt"}, true, 1, 0, "v0 B", "B's update survives"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lines, m := runDemo(t, tc.args...)
			out := strings.Join(lines, "\n")
			if got := m[1] == "true"; got != tc.fenced {
				t.Errorf("fenced=%s, want %v", m[1], tc.fenced)
			}
			a, termA, leaderA, b, termB, leaderB := m[2], atoi(t, m[3]), m[4], m[5], atoi(t, m[6]), m[7]
			if leaderA != a || leaderB != b || a == b {
				t.Errorf("A=%s (epoch leader %s), B=%s (epoch leader %s): want two different nodes, each named in its own epoch", a, leaderA, b, leaderB)
			}
			if termB <= termA {
				t.Errorf("B's term %d is not above A's %d", termB, termA)
			}
			if got := atoi(t, m[9]); got != tc.refused {
				t.Errorf("refused=%d, want %d", got, tc.refused)
			}
			if got := atoi(t, m[10]); got != tc.lost {
				t.Errorf("lost=%d, want %d", got, tc.lost)
			}
			if m[11] != tc.data {
				t.Errorf("data=[%s], want [%s]", m[11], tc.data)
			}
			// A's late write must carry A's old epoch, taken before the pause.
			for _, want := range []string{
				"still believes it leads",
				"with the token it took before the pause (demo/" + m[3] + "/" + a + ")",
				tc.verdict,
			} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			if tc.fenced && !strings.Contains(out, "presented demo/"+m[3]+"/"+a+", highest demo/"+m[6]+"/"+b) {
				t.Errorf("the refusal does not name A's and B's epochs:\n%s", out)
			}
			if t.Failed() {
				t.Logf("output:\n%s", out)
			}
		})
	}
}
