package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestProgressMissing: full service is a confirmed leader, an accepted
// write and, with roles, every role held and written — each seen after the
// fault ended; what is missing is named.
func TestProgressMissing(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	var p progress
	roles := []string{"job-01", "job-02"}
	if got := p.missing(ms(100), nil); got != "no leader with a confirmed epoch; no write accepted by the store" {
		t.Errorf("nothing seen: %q", got)
	}
	p.noteClaim(ms(150))
	p.noteAck(ms(90)) // called before the fault ended: does not count
	if got := p.missing(ms(100), nil); got != "no write accepted by the store" {
		t.Errorf("leader only: %q", got)
	}
	p.noteAck(ms(120))
	p.noteAck(ms(110)) // an older call answered later: the latest stays
	if got := p.missing(ms(100), nil); got != "" {
		t.Errorf("leader and write: %q, want nothing missing", got)
	}
	if got := p.missing(ms(130), nil); got != "no write accepted by the store" {
		t.Errorf("since 130ms: %q", got)
	}
	if got := p.missing(ms(100), roles); got != "roles held by no node: job-01 job-02" {
		t.Errorf("roles unseen: %q", got)
	}
	p.noteRoleHeld("job-01", ms(105))
	p.noteRoleHeld("job-02", ms(95))
	p.noteRoleAck("job-01", ms(101))
	if got := p.missing(ms(100), roles); got != "roles held by no node: job-02" {
		t.Errorf("job-02 held before only: %q", got)
	}
	p.noteRoleHeld("job-02", ms(140))
	if got := p.missing(ms(100), roles); got != "roles held with no write accepted: job-02" {
		t.Errorf("job-02 held, not written: %q", got)
	}
	p.noteRoleAck("job-02", ms(141))
	if got := p.missing(ms(100), roles); got != "" {
		t.Errorf("all back: %q", got)
	}
}

// TestRecoveryBoundDerived: the derived bound grows with the heartbeat and
// with roles, is scaled (never shrunk) for load, and an explicit bound is
// taken as it is.
func TestRecoveryBoundDerived(t *testing.T) {
	c := Config{Heartbeat: 150 * time.Millisecond}.withDefaults()
	base := c.recoveryBase()
	if want := 20*150*time.Millisecond + 4*c.PollEvery + 2*time.Second; base != want {
		t.Errorf("base %v, want %v", base, want)
	}
	if b := c.recoveryBound(); b < base {
		t.Errorf("bound %v below its base %v", b, base)
	}
	r := c
	r.Roles = 3
	if r.recoveryBase() <= base {
		t.Errorf("roles do not lengthen the bound: %v", r.recoveryBase())
	}
	c.RecoveryBound = 7 * time.Second
	if b := c.recoveryBound(); b != 7*time.Second {
		t.Errorf("explicit bound became %v", b)
	}
	if err := (Config{Binary: "x", Dir: "d", FailureDir: "f", Nodes: 3, Heartbeat: time.Second, Faults: 1, OnlyFaults: []string{"partitoin"}}).Validate(); err == nil || !strings.Contains(err.Error(), "partitoin") {
		t.Errorf("unknown fault kind: %v", err)
	}
}

// TestChaosLivenessControl plants a liveness bug — nodes that withhold
// their epochs for good once a partition healed (-stall-after-heal) — and
// injects partitions only: no safety check can see it (nothing wrong is
// ever written), the liveness oracle must, naming the partition after
// which service did not come back.
func TestChaosLivenessControl(t *testing.T) {
	cfg := shortConfig(t)
	cfg.StallAfterHeal, cfg.OnlyFaults, cfg.Faults = true, []string{"partition"}, 3
	// Service never comes back here, so the bound is only how long the
	// control waits before its verdict.
	cfg.RecoveryBound = 4 * time.Second
	cfg.FailureDir = t.TempDir()
	cfg.CheckTimeout = 30 * time.Second
	res := runChaos(t, cfg)
	fmt.Println(res.Line + " (liveness control)")
	late := res.Recovery.Late()
	if len(late) == 0 || res.Passed() {
		t.Fatalf("service never came back after a partition healed, and the run passed: the liveness oracle cannot see it (seed %d): %s", cfg.Seed, res.Recovery.Line())
	}
	if !strings.Contains(late[0].Fault, "(partition: ") || !strings.Contains(late[0].Missing, "no leader with a confirmed epoch") {
		t.Errorf("late recovery %q: want it to name the partition and the missing epoch", late[0])
	}
	if res.Faults != len(res.Recovery.Recoveries) || res.Faults >= cfg.Faults {
		t.Errorf("%d faults, %d recoveries: want the nemesis stopped at the first late one (of %d)", res.Faults, len(res.Recovery.Recoveries), cfg.Faults)
	}
	if res.Violated() {
		t.Errorf("a safety check failed too: stale_accepted=%d lost=%d linearizable=%v", res.StaleAccepted, res.Lost, res.Linearizable)
	}
	if b, err := os.ReadFile(filepath.Join(res.FailurePath, "seed.txt")); err != nil || !strings.Contains(string(b), "liveness:") {
		t.Errorf("the failure report does not say why: %v\n%s", err, b)
	}
	t.Logf("liveness violation detected as it should be: %s", late[0])
}
