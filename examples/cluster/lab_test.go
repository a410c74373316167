package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/termfence/termfence/internal/netlab/netlabtest"
)

// TestLabCommand runs `cluster -lab`, the one command that shows the
// essay on three machines: node processes on hosts of their own, the
// leader paused with SIGSTOP, then a leader partitioned by the kernel;
// the fenced store refuses both late writes, nothing is lost, and the lab
// is gone afterwards.
func TestLabCommand(t *testing.T) {
	t.Parallel()
	netlabtest.Require(t)
	m, out := runScenario(t, testScenarioHeartbeat, "-lab")
	for k, v := range map[string]string{"scenario": "lab", "fenced": "true", "late_accepted": "0", "lost": "0", "ok": "true"} {
		if m[k] != v {
			t.Errorf("%s=%q, want %q", k, m[k], v)
		}
	}
	for _, k := range []string{"refused_paused", "refused_partitioned"} {
		if num(t, m, k) < 1 {
			t.Errorf("%s=%s: the deposed leader's late write was not refused", k, m[k])
		}
	}
	checkAB("kill -STOP")(t, m, out)
	b, c := epochOf(t, m, "epochB"), epochOf(t, m, "epochC")
	if c.Leader != m["C"] || c.Leader == m["B"] || c.Term <= b.Term {
		t.Errorf("B=%s (%s), C=%s (%s): want C, another node, elected above B's term", m["B"], b, m["C"], c)
	}
	if num(t, m, "pause") <= num(t, m, "lease") || num(t, m, "partition") <= num(t, m, "lease") {
		t.Errorf("pause %s and partition %s must outlast the lease %s", m["pause"], m["partition"], m["lease"])
	}
	for _, want := range []string{
		"n1=198.18.0.1:7101", "n2=198.18.0.2:7101", "n3=198.18.0.3:7101", "store(198.18.0.4)",
		"partitioned by the kernel", "presented " + m["epochB"] + ", highest " + m["epochC"],
		"presented " + m["epochA"] + ", highest " + m["epochB"],
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	// Nothing of the lab is left: every lab namespace on the machine
	// belongs to a live process (other tests' labs).
	ents, err := os.ReadDir("/run/netns")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range ents {
		f := strings.Split(e.Name(), "-")
		if len(f) < 2 || f[0] != "tfl" {
			continue
		}
		pid, err := strconv.Atoi(f[1])
		if err != nil {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			t.Errorf("a lab of a dead process is left: %s", e.Name())
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}
