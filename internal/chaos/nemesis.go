package chaos

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/termfence/termfence/internal/liveness"
)

// faultKind is one kind of fault the nemesis injects.
type faultKind int

const (
	pauseLeader faultKind = iota
	killNode
	partition
	resign
	killStore
	hostilePeer
	refusedLink
	// disconnect: writes through the leader whose clients give up within
	// milliseconds, mid-write: the node's store request is cancelled while
	// the store holds the fence for it.
	disconnect
	// trickle: a write straight to the store under the leader's epoch whose
	// body trickles in, past the proxy's timeout, while the leader resigns
	// (proxy backends only).
	trickle
	// killSession: pg_terminate_backend of the store's PostgreSQL sessions,
	// mid-write (postgres backend only).
	killSession
	// powerCutNode, powerCutStore: a power cut under a node's data
	// directory or the store's data (Config.PowerLoss; power.go).
	powerCutNode
	powerCutStore
	// pauseRoleOwner: SIGSTOP/SIGCONT of a node holding roles, with role
	// writes pinned in its handler (Config.Roles; roles.go).
	pauseRoleOwner
	numFaultKinds
)

var faultNames = [...]string{"pause-leader", "kill-node", "partition", "resign", "kill-store", "hostile-peer", "refused-link", "disconnect", "trickle", "kill-session", "power-cut-node", "power-cut-store", "pause-role-owner"}

func (k faultKind) String() string { return faultNames[k] }

// faultWeights: pauses are the fault fencing exists for, so they come most.
var faultWeights = [numFaultKinds]int{pauseLeader: 35, killNode: 20, partition: 20, resign: 10, killStore: 15,
	hostilePeer: 10, refusedLink: 10, disconnect: 15, trickle: 20, killSession: 20,
	powerCutNode: 20, powerCutStore: 15, pauseRoleOwner: 35}

// allowed reports whether the run's backend and mode take fault kind k.
func (n *nemesis) allowed(k faultKind) bool {
	switch k {
	case killStore:
		return n.cfg.durable() // the memory fence forgets everything on restart
	case trickle:
		return n.cfg.proxied()
	case killSession:
		return n.cfg.Backend == "postgres"
	case hostilePeer:
		return n.cfg.Forge != ""
	case powerCutNode:
		return n.cfg.PowerLoss
	case powerCutStore:
		return n.cfg.PowerLoss && n.cfg.durable() && n.cfg.Backend != "postgres"
	case pauseRoleOwner:
		return n.cfg.Roles > 0
	}
	return true
}

// first returns the faults every run injects first, once each: clients
// that disconnect mid-write, and by backend trickled bodies (proxies) and
// killed sessions (postgres).
func (n *nemesis) first() []faultKind {
	var kinds []faultKind
	w := n.weights()
	for _, k := range []faultKind{disconnect, trickle, killSession} {
		if w[k] > 0 {
			kinds = append(kinds, k)
		}
	}
	return kinds
}

// nemesis injects faults drawn from a seeded generator, one at a time.
type nemesis struct {
	c      *cluster
	w      *workload
	cfg    Config
	rng    *rand.Rand
	faults int
	counts [numFaultKinds]int
	logf   func(format string, args ...any)
	// hostileAccepted lists the forged RPCs a node accepted (forge's
	// ACCEPTED lines): each is a violation.
	hostileAccepted []string
	// labCounts counts netlab-mode partitions by kind and mode.
	labCounts map[string]int
	// live records each fault's recovery (recovery.go); late is set when
	// service did not come back within the bound, and ends the faults.
	live liveness.Report
	late bool
	// said is the last line logged about a fault ("fault N: ..."), which
	// names it in its recovery.
	said atomic.Pointer[string]
}

// labFaultWeights, in netlab mode: partitions are what the lab is for,
// so they come as often as pauses.
var labFaultWeights = [numFaultKinds]int{pauseLeader: 30, killNode: 15, partition: 30, resign: 10, killStore: 15}

// weights are the fault kinds' weights in this run's mode; a kind of
// weight 0 is never injected.
func (n *nemesis) weights() [numFaultKinds]int {
	weights := faultWeights
	if n.cfg.Netlab {
		// The kernel cuts links in the lab; the hostile peer and the
		// transport-level refused link are the in-process mode's.
		weights = labFaultWeights
	}
	for k := range weights {
		if !n.allowed(faultKind(k)) || (len(n.cfg.OnlyFaults) > 0 && !slices.Contains(n.cfg.OnlyFaults, faultKind(k).String())) {
			weights[k] = 0
		}
	}
	return weights
}

func (n *nemesis) pick() faultKind {
	weights := n.weights()
	total := 0
	for _, w := range weights {
		total += w
	}
	x := n.rng.Intn(total)
	for k, w := range weights {
		if x < w {
			return faultKind(k)
		}
		x -= w
	}
	return pauseLeader
}

// leases returns a duration uniform in [lo, hi] leases.
func (n *nemesis) leases(lo, hi float64) time.Duration {
	f := lo + n.rng.Float64()*(hi-lo)
	return time.Duration(f * float64(n.cfg.Heartbeat))
}

// run injects faults until at least cfg.Faults were injected and
// cfg.Duration has passed, or ctx ends.
func (n *nemesis) run(ctx context.Context) error {
	start := time.Now()
	first := n.first()
	// Draw everything from the seed before acting on it. The faults this
	// backend is run for come first: drawn at random among all kinds, a
	// run would often have none of them.
	pick := func() faultKind {
		k := n.pick()
		if n.faults < len(first) {
			k = first[n.faults]
		}
		return k
	}
	for ctx.Err() == nil && !n.late && (n.faults < n.cfg.Faults || time.Since(start) < n.cfg.Duration) {
		if err := n.one(ctx, pick); err != nil {
			return err
		}
	}
	// Every kind at least once, whatever the seed drew (the draws above
	// stay those of the seed).
	for k := range numFaultKinds {
		if ctx.Err() != nil || n.late || n.counts[k] > 0 || n.weights()[k] == 0 {
			continue
		}
		if err := n.one(ctx, func() faultKind { return k }); err != nil {
			return err
		}
	}
	return nil
}

// one lets the cluster settle, draws a fault with pick and injects it.
func (n *nemesis) one(ctx context.Context, pick func() faultKind) error {
	// Let the cluster settle: a leader, then a little load under it.
	if _, err := n.waitLeader(ctx, 40*n.cfg.Heartbeat); err != nil {
		n.logf("no leader before fault %d: %v", n.faults+1, err)
	}
	sleepCtx(ctx, n.leases(1, 3))
	if ctx.Err() != nil {
		return nil
	}
	// Draw everything from the seed before acting on it.
	kind := pick()
	var err error
	switch kind {
	case pauseLeader:
		err = n.pause(ctx, n.leases(1, 5))
	case killNode:
		err = n.killNode(ctx, n.rng.Intn(len(n.c.nodes)), n.leases(1, 6))
	case partition:
		err = n.partition(ctx, n.rng.Intn(len(n.c.nodes)), n.rng.Intn(3) == 0, n.rng.Intn(len(n.c.nodes)), n.leases(2, 8))
	case resign:
		err = n.resign(ctx)
	case killStore:
		err = n.killStore(ctx, n.leases(0, 4))
	case hostilePeer:
		err = n.hostile(ctx)
	case refusedLink:
		err = n.refuseLink(ctx, n.rng.Intn(len(n.c.nodes)), n.leases(4, 12))
	case disconnect:
		err = n.disconnect(ctx)
	case trickle:
		err = n.trickle(ctx)
	case killSession:
		err = n.killSession(ctx)
	case powerCutNode:
		err = n.powerCutNode(ctx, n.rng.Intn(len(n.c.nodes)), n.leases(1, 6))
	case powerCutStore:
		err = n.powerCutStore(ctx, n.leases(0, 4))
	case pauseRoleOwner:
		err = n.pauseRoleOwner(ctx, n.rng.Intn(len(n.c.nodes)), n.leases(3, 8))
	}
	if err != nil {
		return fmt.Errorf("chaos: fault %d (%v): %w", n.faults+1, kind, err)
	}
	n.faults++
	n.counts[kind]++
	// The fault has ended: full service must come back within the bound
	// (recovery.go).
	if !n.awaitRecovery(ctx, kind, n.w.rec.Now(), time.Now()) {
		n.late = true
	}
	return nil
}

// waitLeader waits until some node claims leadership and returns it.
func (n *nemesis) waitLeader(ctx context.Context, limit time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(n.cfg.PollEvery)
	defer tick.Stop()
	for {
		best, bestTerm := -1, uint64(0)
		for i, nd := range n.c.nodes {
			if !nd.proc.running() {
				continue
			}
			st, err := n.c.status(ctx, i, 5*n.cfg.PollEvery)
			if err != nil {
				continue
			}
			if ep, ok := st.leaderEpoch(); ok && ep.Term > bestTerm {
				best, bestTerm = i, ep.Term
			}
		}
		if best >= 0 {
			n.w.believe(best, bestTerm)
			return best, nil
		}
		select {
		case <-ctx.Done():
			return -1, ctx.Err()
		case <-tick.C:
		}
	}
}

// pause SIGSTOPs the leader for d while writes are in flight inside its
// /write handler. Every pinned write has had its handler start (the node
// sent "100 Continue"). Some ("racing") get their bodies a few tens of
// microseconds apart just before the SIGSTOP, so the stop lands at
// different points of their handling, some after the node took its epoch
// and before the store got the write. The others ("held") get their bodies
// while the node is stopped, just before SIGCONT. Then the node is
// continued and every pinned write's answer collected.
func (n *nemesis) pause(ctx context.Context, d time.Duration) error {
	li, err := n.waitLeader(ctx, 20*n.cfg.Heartbeat)
	if err != nil {
		n.logf("fault %d: pause: no leader to pause", n.faults+1)
		return nil
	}
	const racing = 4
	var held, race []*pinned
	for k := 0; k < racing+min(n.cfg.Resources, 4); k++ {
		p := n.w.openPinned(ctx, n.cfg.Writers+k%n.cfg.Resources, li, n.cfg.resource(k%n.cfg.Resources))
		switch {
		case p == nil:
		case k < racing:
			race = append(race, p)
		default:
			held = append(held, p)
		}
	}
	nd := n.c.nodes[li]
	var outcomes []string
	err = n.pinnedStop(nd, race, held, func() {
		inflight := 0
		for _, p := range append(race, held...) {
			if !p.done {
				inflight++
			}
		}
		n.logf("fault %d: SIGSTOP leader %s for %v with %d pinned writes in flight", n.faults+1, nd.id, d.Round(time.Millisecond), inflight)
		sleepCtx(ctx, d)
	}, func(p *pinned) {
		outcomes = append(outcomes, fmt.Sprintf("%v@%d", p.op.Outcome, p.op.Term))
	})
	if err != nil {
		return err
	}
	n.logf("  pinned writes via %s: %v", nd.id, outcomes)
	return nil
}

// spin busy-waits for d: a sleep's granularity is too coarse to place a
// signal within a request's handling.
func spin(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}

// killNode SIGKILLs node i, keeps it down for d, and restarts it on the same
// data dir.
func (n *nemesis) killNode(ctx context.Context, i int, d time.Duration) error {
	nd := n.c.nodes[i]
	lead, _ := n.w.leader()
	nd.proc.kill()
	n.logf("fault %d: SIGKILL %s (leader: %t), down %v", n.faults+1, nd.id, lead == i, d.Round(time.Millisecond))
	sleepCtx(ctx, d)
	if ctx.Err() != nil {
		return nil
	}
	return n.c.startNode(ctx, i)
}

// partition cuts node i off (isolate) or cuts the link between i and j, for
// d, then heals every node.
func (n *nemesis) partition(ctx context.Context, i int, isolateLeader bool, j int, d time.Duration) error {
	if isolateLeader {
		if li, _ := n.w.leader(); li >= 0 {
			i = li
		}
	}
	if n.cfg.Netlab {
		return n.labPartition(ctx, n.drawLabFault(i, isolateLeader, j), d)
	}
	if j == i {
		j = (i + 1) % len(n.c.nodes)
	}
	var what string
	if n.rng.Intn(2) == 0 {
		what = "isolate " + n.c.nodes[i].id
		if err := n.c.fault(ctx, i, "isolate"); err != nil {
			return err
		}
	} else {
		what = "cut " + n.c.nodes[i].id + "<->" + n.c.nodes[j].id
		if err := n.c.fault(ctx, i, "cut", n.c.nodes[j].raft); err != nil {
			return err
		}
	}
	n.logf("fault %d: partition: %s for %v", n.faults+1, what, d.Round(time.Millisecond))
	sleepCtx(ctx, d)
	return n.healAll(ctx)
}

// healAll undoes every partition on every running node (in netlab
// mode: every fault of the lab).
func (n *nemesis) healAll(ctx context.Context) error {
	if n.cfg.Netlab {
		return n.c.lab.Heal(context.WithoutCancel(ctx))
	}
	for i, nd := range n.c.nodes {
		if !nd.proc.running() {
			continue
		}
		if err := n.c.fault(context.WithoutCancel(ctx), i, "heal"); err != nil {
			return err
		}
	}
	return nil
}

// resign asks the leader to hand leadership over.
func (n *nemesis) resign(ctx context.Context) error {
	li, err := n.waitLeader(ctx, 20*n.cfg.Heartbeat)
	if err != nil {
		n.logf("fault %d: resign: no leader", n.faults+1)
		return nil
	}
	st, b, err := n.c.do(ctx, http.MethodPost, "http://"+n.c.nodes[li].proc.addr+"/resign", struct{}{}, 2*time.Second)
	switch {
	case err != nil:
		n.logf("fault %d: resign %s: %v", n.faults+1, n.c.nodes[li].id, err)
	case st/100 == 4:
		// The node refused the request itself: the nemesis is not injecting
		// the fault it claims to, and the run would pass without it.
		return fmt.Errorf("%s /resign refused the nemesis: %d %s", n.c.nodes[li].id, st, bytes.TrimSpace(b))
	default:
		n.logf("fault %d: resign %s: %d %s", n.faults+1, n.c.nodes[li].id, st, bytes.TrimSpace(b))
	}
	return nil
}

// killStore SIGKILLs the store, keeps it down for d and restarts it on the
// same data.
func (n *nemesis) killStore(ctx context.Context, d time.Duration) error {
	from := n.w.rec.Now()
	n.c.store.kill()
	dead := n.w.rec.Now()
	n.logf("fault %d: SIGKILL store, down %v", n.faults+1, d.Round(time.Millisecond))
	sleepCtx(ctx, d)
	n.c.noteStoreDead(dead, n.w.rec.Now())
	err := n.c.startStore(context.WithoutCancel(ctx))
	n.c.noteStoreDown(from, n.w.rec.Now())
	return err
}

// hostile runs the hostile peer (internal/cmd/forge): a process that is
// not a member sends every running node forged RequestVote, RequestPreVote,
// TimeoutNow, AppendEntries and InstallSnapshot RPCs with huge terms, as a
// stranger, as nobody and as each member. Each must be refused; one that is
// accepted is recorded as a violation, and the checker's term bound
// (SaneTerm) catches a term one of them moved.
func (n *nemesis) hostile(ctx context.Context) error {
	var targets, members []string
	for _, nd := range n.c.nodes {
		members = append(members, nd.id+"="+nd.raft)
		if nd.proc.running() {
			targets = append(targets, nd.raft)
		}
	}
	// forge draws its RPCs from internal/hostile's generator (the fuzzer's), seeded here.
	cmd := exec.CommandContext(ctx, n.cfg.Forge, "-targets", strings.Join(targets, ","), "-members", strings.Join(members, ","), "-timeout", "2s",
		"-seed", strconv.FormatInt(n.rng.Int63(), 10))
	out, err := cmd.CombinedOutput()
	code := cmd.ProcessState.ExitCode()
	if err != nil && code != 1 {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("forge: %w\n%s", err, out)
	}
	summary := ""
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasSuffix(line, ": ACCEPTED") {
			n.hostileAccepted = append(n.hostileAccepted, line)
		}
		summary = line
	}
	n.logf("fault %d: hostile peer against %d nodes: %s", n.faults+1, len(targets), summary)
	return nil
}

// refuseLink makes the link between the leader and follower j (another one
// if j leads) refuse connections both ways for d — transport.Faulty.Refuse
// on both nodes, a firewall that rejects: RPCs and the waker's probes fail
// with ECONNREFUSED while both still reach the third node — then heals
// every node.
func (n *nemesis) refuseLink(ctx context.Context, j int, d time.Duration) error {
	li, err := n.waitLeader(ctx, 20*n.cfg.Heartbeat)
	if err != nil {
		n.logf("fault %d: refused link: no leader", n.faults+1)
		return nil
	}
	if j == li {
		j = (j + 1) % len(n.c.nodes)
	}
	if !n.c.nodes[j].proc.running() {
		n.logf("fault %d: refused link: %s is down", n.faults+1, n.c.nodes[j].id)
		return nil
	}
	if err := n.c.fault(ctx, li, "refuse", n.c.nodes[j].raft); err != nil {
		return err
	}
	if err := n.c.fault(ctx, j, "refuse", n.c.nodes[li].raft); err != nil {
		return err
	}
	n.logf("fault %d: refused link %s<->%s (leader %s) for %v", n.faults+1, n.c.nodes[li].id, n.c.nodes[j].id, n.c.nodes[li].id, d.Round(time.Millisecond))
	sleepCtx(ctx, d)
	return n.healAll(ctx)
}
