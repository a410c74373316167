package election

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/termfence/termfence/internal/freeport"
	"github.com/termfence/termfence/transport"
)

// TestRolesPerf measures roles on three nodes over loopback TCP with
// raft-boltdb (docs/PERFORMANCE.md, "Roles"): the failover of k roles of
// 10,000 when their member dies, a planned handover, idle CPU with 10,000
// roles against none, and memory per role. It runs only with
// TERMFENCE_ROLE_PERF set (a measurement, not a test):
//
//	TERMFENCE_ROLE_PERF=1 go test -run TestRolesPerf -v -timeout 60m ./election/
//
// TERMFENCE_ROLE_PERF_PARTS (default failover,handover,idle) picks the
// measurements, TERMFENCE_ROLE_PERF_K (default 1,100,3333) the k of the
// failover; TERMFENCE_ROLE_PERF_N (default 20) is the number of runs
// per k, and
// TERMFENCE_ROLE_LEASE (default 1s) the role lease, Config.RoleLease: the
// leader's reassignment bound, compared with an etcd session's TTL
// (HeartbeatTimeout is a quarter of it).
func TestRolesPerf(t *testing.T) {
	if os.Getenv("TERMFENCE_ROLE_PERF") == "" {
		t.Skip("a measurement: set TERMFENCE_ROLE_PERF=1 to run it")
	}
	n := envInt("TERMFENCE_ROLE_PERF_N", 20)
	lease := time.Second
	if s := os.Getenv("TERMFENCE_ROLE_LEASE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		lease = d
	}
	const total = 10000
	roles := make([]string, total)
	for i := range roles {
		roles[i] = fmt.Sprintf("role-%05d", i)
	}
	t.Logf("three nodes, loopback TCP, raft-boltdb; %d roles; role lease %v, HeartbeatTimeout %v", total, lease, lease/4)
	parts := os.Getenv("TERMFENCE_ROLE_PERF_PARTS") // default: all
	part := func(p string) bool { return parts == "" || slices.Contains(strings.Split(parts, ","), p) }
	ks := []int{1, 100, 3333}
	if v := os.Getenv("TERMFENCE_ROLE_PERF_K"); v != "" {
		ks = nil
		for _, f := range strings.Split(v, ",") {
			k, err := strconv.Atoi(f)
			if err != nil || k < 1 || k > total {
				t.Fatalf("TERMFENCE_ROLE_PERF_K: bad k %q", f)
			}
			ks = append(ks, k)
		}
	}
	for _, k := range ks {
		if !part("failover") {
			break
		}
		var samples []time.Duration
		for range n {
			samples = append(samples, measureFailover(t, roles, k, lease))
		}
		t.Logf("failover k=%d: %s (lease %v)", k, quantiles(samples), lease)
	}
	if part("handover") {
		measureHandover(t, roles, lease, max(n, 50))
	}
	if part("idle") {
		measureIdle(t, roles, lease)
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func quantiles(s []time.Duration) string {
	s = slices.Clone(s)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return fmt.Sprintf("n=%d p50=%v p99=%v min=%v max=%v", len(s), q(0.5).Round(time.Millisecond), q(0.99).Round(time.Millisecond), s[0].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}

// perfCluster is three Elections on loopback TCP with bolt stores.
type perfCluster struct {
	els []*Election
	ids []string
}

func startPerfCluster(t *testing.T, roles []string, lease time.Duration) *perfCluster {
	t.Helper()
	addrs, err := freeport.Addrs(3)
	if err != nil {
		t.Fatal(err)
	}
	pc := &perfCluster{}
	var boot []Server
	for i, a := range addrs {
		id := fmt.Sprintf("p%d", i+1)
		pc.ids = append(pc.ids, id)
		boot = append(boot, Server{ID: id, Addr: a})
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ht := lease / 4
	for i, id := range pc.ids {
		tr, err := transport.NewTCP(addrs[i], "", transport.Config{Logger: quiet, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		el, err := New(Config{ID: id, Cluster: "perf", DataDir: t.TempDir(), Transport: tr, Bootstrap: boot,
			HeartbeatTimeout: ht, ElectionTimeout: ht, LeaderLeaseTimeout: ht / 2, Logger: quiet,
			Roles: roles, RoleLease: lease})
		if err != nil {
			t.Fatal(err)
		}
		pc.els = append(pc.els, el)
	}
	return pc
}

func (pc *perfCluster) close() {
	for _, el := range pc.els {
		_ = el.Close()
	}
}

func (pc *perfCluster) leader(t *testing.T) *Election {
	var ld *Election
	waitForUpTo(t, time.Minute, "a serving leader", func() bool {
		for _, el := range pc.els {
			rs := el.roles
			rs.mu.Lock()
			term := rs.ls.term
			rs.mu.Unlock()
			if tt, ok := el.held(); ok && tt == term && term != 0 {
				ld = el
				return true
			}
		}
		return false
	})
	return ld
}

// heldBy counts, per node, the roles it holds now.
func (pc *perfCluster) allHeld(n int) bool {
	got := 0
	for _, el := range pc.els {
		if !el.closed.Load() {
			got += len(el.HeldRoles())
		}
	}
	return got == n
}

// measureFailover places k roles on a follower, kills it (raft shut down
// at once: no more renewals, no handover) and returns the time until each
// of its k roles is held elsewhere under a newer grant.
func measureFailover(t *testing.T, roles []string, k int, lease time.Duration) time.Duration {
	pc := startPerfCluster(t, roles, lease)
	defer pc.close()
	slowWait(t, "every role held", func() bool { return pc.allHeld(len(roles)) })
	for _, el := range pc.els {
		el.roles.noBalance.Store(true)
	}
	var victim *Election
	for attempt := 0; ; attempt++ {
		if attempt == 10 {
			dumpPerfLeader(t, pc)
			t.Fatalf("the placement of %d roles never held", k)
		}
		ld := pc.leader(t)
		if victim == nil {
			for _, el := range pc.els {
				if el != ld {
					victim = el
					break
				}
			}
		}
		if ld == victim { // the victim is a follower: one kill, no election
			_ = victim.Resign(context.Background())
			continue
		}
		var others []string
		for _, el := range pc.els {
			if el != victim {
				others = append(others, el.cfg.ID)
			}
		}
		// Place k roles on the victim, the rest on the others. Setup only:
		// the old owners are not blocked from renewal while the big entries
		// commit; nobody uses the roles yet.
		grants := ld.RoleGrants()
		set := map[string]string{}
		for i, r := range roles {
			want := others[i%len(others)]
			if i < k {
				want = victim.cfg.ID
			}
			if grants[r].Owner != want {
				set[r] = want
			}
		}
		failed := false
		for len(set) > 0 && !failed {
			part := map[string]string{}
			for r, o := range set {
				part[r] = o
				delete(set, r)
				if len(part) == maxRolesPerEntry {
					break
				}
			}
			if err := ld.roles.leaderApply(context.Background(), &roleEntry{Set: part}, nil, nil); err != nil {
				t.Logf("placing roles: %v; again", err)
				failed = true
			}
		}
		if failed {
			continue
		}
		held := false
		deadline := time.Now().Add(10 * time.Second)
		for !held && time.Now().Before(deadline) {
			held = len(victim.HeldRoles()) == k && pc.allHeld(len(roles))
			time.Sleep(50 * time.Millisecond) // poll interval: HeldRoles copies the table
		}
		if held {
			// The kill falls anywhere in the renewal cycle, as etcdroles'
			// falls anywhere in the keep-alive cycle: without it, it would
			// come at one phase of the renewals the placement happened to
			// leave. A placement lost meanwhile (a leader change on a
			// loaded machine) is placed again.
			time.Sleep(rand.N(lease))
			if len(victim.HeldRoles()) == k && pc.allHeld(len(roles)) {
				break
			}
			t.Logf("placement of %d on %s lost before the kill; again", k, victim.cfg.ID)
			continue
		}
		var counts []string
		for _, el := range pc.els {
			own := map[string]int{}
			for _, g := range el.RoleGrants() {
				own[g.Owner]++
			}
			counts = append(counts, fmt.Sprintf("%s holds %d (lease left %v, table %v)", el.cfg.ID, len(el.HeldRoles()), el.roles.leaseUntil()-el.roles.clk(), own))
		}
		t.Logf("placement of %d on %s did not hold: %v; again", k, victim.cfg.ID, counts)
	}
	mine := victim.HeldRoles()
	old := victim.RoleGrants()
	start := time.Now()
	_ = victim.Raft().Shutdown().Error()
	_ = victim.Close()
	waitForUpTo(t, time.Minute, "the victim's roles held elsewhere", func() bool {
		for _, r := range mine {
			ok := false
			for _, el := range pc.els {
				if el == victim {
					continue
				}
				if ep, err := el.RoleEpoch(r); err == nil && ep.Term > old[r].Grant {
					ok = true
					break
				}
			}
			if !ok {
				return false
			}
		}
		return true
	})
	return time.Since(start)
}

// measureHandover moves one role at a time between live members
// (MoveRole) and times each until the new owner holds it.
func measureHandover(t *testing.T, roles []string, lease time.Duration, n int) {
	pc := startPerfCluster(t, roles, lease)
	defer pc.close()
	ld := pc.leader(t)
	slowWait(t, "every role held", func() bool { return pc.allHeld(len(roles)) })
	for _, el := range pc.els {
		el.roles.noBalance.Store(true)
	}
	byID := map[string]*Election{}
	for _, el := range pc.els {
		byID[el.cfg.ID] = el
	}
	var samples []time.Duration
	for i := range n {
		r := roles[i]
		g := ld.RoleGrants()[r]
		to := pc.ids[(slices.Index(pc.ids, g.Owner)+1)%len(pc.ids)]
		start := time.Now()
		if err := ld.MoveRole(context.Background(), r, to); err != nil {
			t.Logf("MoveRole: %v; skipped", err)
			ld = pc.leader(t)
			continue
		}
		// A leader change may give r to another member than to.
		waitForUpTo(t, time.Minute, "a new owner holds "+r, func() bool {
			for _, el := range byID {
				if ep, err := el.RoleEpoch(r); err == nil && ep.Term > g.Grant {
					return true
				}
			}
			return false
		})
		samples = append(samples, time.Since(start))
	}
	t.Logf("handover (MoveRole until the new owner holds the role): %s", quantiles(samples))
}

// measureIdle compares the process's CPU time over a window with 10,000
// roles against the same group with none, in alternating windows, and the
// heap per role.
func measureIdle(t *testing.T, roles []string, lease time.Duration) {
	window := 10 * time.Second
	cpu := func(rs []string) (time.Duration, uint64) {
		pc := startPerfCluster(t, rs, lease)
		defer pc.close()
		pc.leader(t)
		slowWait(t, "every role held", func() bool { return pc.allHeld(len(rs)) })
		time.Sleep(2 * lease) // settle: the measurement window starts in the steady state
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		c0 := rusage()
		time.Sleep(window) // the measured window
		return rusage() - c0, ms.HeapAlloc
	}
	var with, without []float64
	var heapWith, heapWithout uint64
	for range envInt("TERMFENCE_ROLE_PERF_IDLE_ROUNDS", 3) {
		c, h := cpu(nil)
		without = append(without, float64(c)/float64(window))
		heapWithout = h
		c, h = cpu(roles)
		with = append(with, float64(c)/float64(window))
		heapWith = h
	}
	mean := func(v []float64) float64 {
		sum := 0.0
		for _, x := range v {
			sum += x
		}
		return sum / float64(len(v))
	}
	t.Logf("idle CPU (3 nodes, one process, CPU s per s): no roles %s; %d roles %s; ratio of the means %.3f", fmtF(without), len(roles), fmtF(with), mean(with)/mean(without))
	per := (int64(heapWith) - int64(heapWithout)) / int64(len(roles)) / 3
	t.Logf("heap: no roles %d B, %d roles %d B: %d B per role per node", heapWithout, len(roles), heapWith, per)
}

func fmtF(v []float64) string {
	var s []string
	for _, x := range v {
		s = append(s, strconv.FormatFloat(x, 'f', 4, 64))
	}
	return strings.Join(s, " ")
}

func rusage() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func dumpPerfLeader(t *testing.T, pc *perfCluster) {
	for _, el := range pc.els {
		rs := el.roles
		rs.mu.Lock()
		if rs.ls.term != 0 {
			t.Logf("%s leads term %d since %v", el.cfg.ID, rs.ls.term, rs.ls.tc)
			for id, m := range rs.ls.members {
				t.Logf("  member %s: %+v", id, *m)
			}
		}
		rs.mu.Unlock()
	}
}

// slowWait polls cond every 50 ms for up to a minute: the conditions copy
// the role table, and polling them every millisecond would load the
// machine the cluster runs on.
func slowWait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after a minute waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}
}
