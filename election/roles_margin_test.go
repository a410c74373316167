package election

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"
)

// stopClock is a role clock that follows real time until the test stops
// it; then it reads what the test sets, and resumes from there (it never
// runs backwards).
type stopClock struct {
	base    time.Time
	mu      sync.Mutex
	stopped bool
	at      time.Duration
	offset  time.Duration
}

func newStopClock() *stopClock { return &stopClock{base: time.Now()} }

func (c *stopClock) now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return c.at
	}
	return time.Since(c.base) + c.offset
}

// stop stops the clock at its current reading and returns it.
func (c *stopClock) stop() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.stopped {
		c.at, c.stopped = time.Since(c.base)+c.offset, true
	}
	return c.at
}

// set moves a stopped clock forward to d.
func (c *stopClock) set(tb testing.TB, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.stopped || d < c.at {
		tb.Fatalf("stopClock.set(%v): stopped %v at %v", d, c.stopped, c.at)
	}
	c.at = d
}

// resume lets the clock run on from where it stands.
func (c *stopClock) resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		c.offset, c.stopped = c.at-time.Since(c.base), false
	}
}

// TestRolesReassignAfterLeaseAndMargin: the leader moves a cut-off
// member's roles only once its clock is past the member's last granted
// renewal plus the bound B (docs/DESIGN.md: RoleLease; the member itself
// holds only H = 4B/5), never at H alone — the gap B − H is what covers a
// member whose clock runs a little slow. The leader's role clock is stopped
// and set by the test, so the check is exact, without a timing window: at
// lastRenew + H + (B−H)/2 nothing moves however long the test waits, at
// lastRenew + B + 1ms the roles move. On the way, the cut-off member, its
// hold lapsed, hands out none of the roles its table still grants it.
func TestRolesReassignAfterLeaseAndMargin(t *testing.T) {
	roles := roleNames(6)
	lease := 4 * testHT
	var mu sync.Mutex
	clocks := map[string]*stopClock{}
	c, _ := newRoleCluster(t, 3, func(nd *node, cfg *Config) {
		withRoles(roles, lease)(nd, cfg)
		mu.Lock()
		defer mu.Unlock()
		if clocks[nd.id] == nil {
			clocks[nd.id] = newStopClock()
		}
		cfg.roleClock = clocks[nd.id].now
	})
	const attempts = 3
	var why []string
	for attempt := 1; attempt <= attempts; attempt++ {
		judged, reason := marginAttempt(t, c, roles, clocks)
		if judged {
			return
		}
		why = append(why, fmt.Sprintf("attempt %d: %s", attempt, reason))
		t.Logf("attempt %d could not judge: %s", attempt, reason)
	}
	t.Fatalf("could not judge the reassignment bound in %d attempts: %v", attempts, why)
}

// marginAttempt runs one attempt of TestRolesReassignAfterLeaseAndMargin.
// It fails the test on a wrong move, and returns judged false (with why)
// when leadership changed under it, which voids what it saw.
func marginAttempt(t *testing.T, c *cluster, roles []string, clocks map[string]*stopClock) (judged bool, why string) {
	all := ids(c)
	settled(t, c, roles, all...)
	ld := leaderServing(t, c)
	rs := ld.el.roles
	rs.mu.Lock()
	term := rs.ls.term
	rs.mu.Unlock()
	var v, m *node // a follower that holds roles, and the other follower
	for _, nd := range c.nodes {
		switch {
		case nd == ld:
		case v == nil && len(nd.el.HeldRoles()) > 0:
			v = nd
		default:
			m = nd
		}
	}
	if v == nil || m == nil {
		return false, "no follower holds a role"
	}
	clk := clocks[ld.id]
	stillLeading := func() bool {
		rs.mu.Lock()
		defer rs.mu.Unlock()
		t2, ok := ld.el.held()
		return ok && t2 == term && rs.ls.term == term
	}
	lastRenew := func(id string) time.Duration {
		rs.mu.Lock()
		defer rs.mu.Unlock()
		if mv := rs.ls.members[id]; mv != nil && mv.lastRenew > rs.ls.tc {
			return mv.lastRenew
		}
		return rs.ls.tc
	}
	// renewedAt waits until ld has granted id a renewal received at the
	// leader's (stopped) clock reading at.
	renewedAt := func(id string, at time.Duration) bool {
		ok := true
		waitFor(t, fmt.Sprintf("%s's renewal at %v on %s's stopped clock", id, at, ld.id), func() bool {
			if !stillLeading() {
				ok = false
				return true
			}
			return lastRenew(id) == at
		})
		return ok
	}

	// Stop the leader's clock, and let v's last renewal be received at
	// that reading: from here on, v's lastRenew is exactly t0.
	t0 := clk.stop()
	defer clk.resume()
	if !renewedAt(v.id, t0) {
		return false, "leadership changed before " + v.id + " renewed"
	}
	v.net.Isolate()
	defer v.net.Heal()
	held := slices.Sorted(slices.Values(v.el.HeldRoles()))
	// v stops holding on its own clock; nothing moves meanwhile, the
	// leader's clock stands at t0.
	waitFor(t, v.id+"'s lease to lapse while cut off", func() bool { return len(v.el.HeldRoles()) == 0 })
	// Its table still grants it those roles (it is cut off: nothing it
	// applies moves them), but with its lease lapsed it hands none out.
	for _, r := range held {
		if ep, err := v.el.RoleEpoch(r); !errors.Is(err, ErrNoRoleLease) {
			t.Fatalf("%s, cut off with its role lease lapsed: RoleEpoch(%s) = %v, %v; want ErrNoRoleLease", v.id, r, ep, err)
		}
		if tok, err := v.el.RoleToken(r); !errors.Is(err, ErrNoRoleLease) {
			t.Fatalf("%s, cut off with its role lease lapsed: RoleToken(%s) = %q, %v; want ErrNoRoleLease", v.id, r, tok, err)
		}
	}
	owned := func() []string {
		var rs []string
		for r, o := range ld.el.RoleOwners() {
			if o == v.id {
				rs = append(rs, r)
			}
		}
		slices.Sort(rs)
		return rs
	}
	before := owned()
	if len(before) == 0 {
		if !stillLeading() {
			return false, "leadership changed while " + v.id + " was cut off"
		}
		t.Fatalf("the leader moved %s's roles %v while its role clock stood at %s's last renewal", v.id, held, v.id)
	}

	// Past the hold, inside the bound: the others renew at this
	// reading (so they are live, and would be given v's roles), then a
	// pass of the assigner must leave v's roles where they are.
	inside := t0 + rs.hold + (rs.bound-rs.hold)/2
	clk.set(t, inside)
	for _, id := range []string{ld.id, m.id} {
		if !renewedAt(id, inside) {
			return false, "leadership changed before " + id + " renewed"
		}
	}
	rs.assignOnce(context.Background(), true)
	if got := owned(); !slices.Equal(got, before) {
		if !stillLeading() {
			return false, "leadership changed inside the margin"
		}
		t.Fatalf("at H + (B-H)/2 (%v) after %s's last renewal, the leader moved its roles: %v -> %v (B-H is %v)",
			rs.hold+(rs.bound-rs.hold)/2, v.id, before, got, rs.bound-rs.hold)
	}

	// Past B: the roles move (the check above was about the bound, not an
	// assigner that does nothing).
	clk.set(t, t0+rs.bound+time.Millisecond)
	poke(rs.assignCh)
	moved := true
	waitFor(t, v.id+"'s roles moved past the bound", func() bool {
		if !stillLeading() {
			moved = false
			return true
		}
		return len(owned()) == 0
	})
	if !moved {
		return false, "leadership changed past the margin"
	}
	return true, ""
}

// TestRolesDecideRefusesStranger: the leader grants a renewal only to a
// member of the configuration at the address the configuration gives it,
// and keeps nothing of any other (admission refuses such renewals first;
// this is the leader's own rule, checked on its own input: a batch handed
// to decide).
func TestRolesDecideRefusesStranger(t *testing.T) {
	roles := roleNames(3)
	c, _ := newRoleCluster(t, 3, withRoles(roles, 4*testHT))
	settled(t, c, roles, ids(c)...)
	for attempt := 1; ; attempt++ {
		ld := leaderServing(t, c)
		rs := ld.el.roles
		rs.mu.Lock()
		term := rs.ls.term
		rs.mu.Unlock()
		var member *node
		for _, nd := range c.nodes {
			if nd != ld {
				member = nd
				break
			}
		}
		got := map[string]bool{}
		var mu sync.Mutex
		answer := func(name string) func(bool, uint64) {
			return func(g bool, _ uint64) {
				mu.Lock()
				defer mu.Unlock()
				got[name] = g
			}
		}
		rs.decide([]renewal{
			{id: "stranger", addr: "stranger", applied: 1 << 40, recv: rs.clk(), answer: answer("stranger")},
			{id: member.id, addr: "elsewhere", applied: 1 << 40, recv: rs.clk(), answer: answer("member at another address")},
			{id: member.id, addr: member.el.localAddr, recv: rs.clk(), applied: member.el.roles.t.applied(), answer: answer("member")},
		}, term)
		mu.Lock()
		res := maps.Clone(got)
		mu.Unlock()
		rs.mu.Lock()
		_, kept := rs.ls.members["stranger"]
		stillTerm := rs.ls.term == term
		rs.mu.Unlock()
		if !res["member"] || !stillTerm {
			// decide refuses everything once this node no longer leads
			// term: it says nothing then.
			if attempt == 3 {
				t.Fatalf("could not judge: the leader lost its term during each of %d attempts (or refused its own member: %v)", attempt, res)
			}
			continue
		}
		if res["stranger"] || kept {
			t.Fatalf("the leader granted a renewal from a stranger (%v) or kept a record of it (%v)", res["stranger"], kept)
		}
		if res["member at another address"] {
			t.Fatalf("the leader granted %s's renewal from an address not its own", member.id)
		}
		return
	}
}

// TestRolesLeaseCountsFromSend: a member counts its role lease from its
// own send time of the renewal the leader granted, not from the answer
// (docs/DESIGN.md, "Leases and the renewal channel"): the leader counts
// from its receipt, which comes after the send, so only then does the
// member's lease end before the leader's bound. Every RPC the member sends
// waits d first (transport.Faulty.Delay), so each granted renewal was sent
// at least d before its answer: at any moment the member's lease may run at
// most L - d ahead of its clock. Counted from the answer, it runs L ahead
// right after each one.
func TestRolesLeaseCountsFromSend(t *testing.T) {
	roles := roleNames(3)
	lease := 4 * testHT
	c, _ := newRoleCluster(t, 3, withRoles(roles, lease))
	for attempt := 1; ; attempt++ {
		settled(t, c, roles, ids(c)...)
		ld := leaderServing(t, c)
		var v *node
		for _, nd := range c.nodes {
			if nd != ld {
				v = nd
				break
			}
		}
		judged, why := leaseFromSendAttempt(t, v, lease)
		if judged {
			return
		}
		if attempt == 3 {
			t.Fatalf("could not judge in %d attempts: %s", attempt, why)
		}
		t.Logf("attempt %d could not judge: %s", attempt, why)
	}
}

func leaseFromSendAttempt(t *testing.T, v *node, lease time.Duration) (judged bool, why string) {
	rs := v.el.roles
	d := lease / 2
	term := v.el.Raft().CurrentTerm()
	set := rs.clk()
	v.net.Delay(d)
	defer v.net.Delay(0)
	// Renewals sent from here on were delayed: their leases end after
	// set + L (one sent earlier ends at or before it).
	var checked []time.Duration
	var bad string
	waitFor(t, fmt.Sprintf("five renewals of %s sent with a %v delay", v.id, d), func() bool {
		if v.el.Raft().State().String() == "Leader" || v.el.Raft().CurrentTerm() != term {
			why = v.id + " became leader, or the term changed (a leader renews itself without the transport)"
			return true
		}
		until := rs.leaseUntil()
		now := rs.clk()
		if until <= set+rs.hold {
			return false
		}
		if ahead := until - now; ahead > rs.hold-d {
			bad = fmt.Sprintf("%s's role lease runs %v ahead of its clock, more than L - d = %v: it was counted from later than the send of a renewal delayed %v", v.id, ahead, rs.hold-d, d)
			return true
		}
		if len(checked) == 0 || checked[len(checked)-1] != until {
			checked = append(checked, until)
		}
		return len(checked) >= 5
	})
	if bad != "" {
		t.Fatal(bad)
	}
	if len(checked) < 5 {
		return false, why
	}
	return true, ""
}
