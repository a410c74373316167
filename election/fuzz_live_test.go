package election

import (
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/internal/hostile"
)

// FuzzLiveCluster turns each input into a sequence of hostile RPCs
// (internal/hostile.Generate: every RPC type, valid and invalid headers,
// claimed member and stranger identities, extreme terms, nil and malformed
// entries and configurations, huge counts, raw frames) and delivers them
// over plain TCP — where a claimed identity is only a claim — to a live
// three-node cluster (transport.NewTCP, bolt stores), one cluster per fuzz
// worker for all its inputs. Oracles, after each input:
//
//   - no panic (a raft panic ends the worker: a crasher);
//   - every RPC a correct node must refuse whatever its state (Op.MustRefuse)
//     was answered with an error;
//   - no node's term beyond the window: above the highest term before the
//     input by more than TermWindow per RPC, or above JumpLimit by more than
//     the input's RPCs (one election each) plus 1000;
//   - at most one leader per term, and I1 (an epoch only for a term the node
//     won), as the harness's checker sees them (every node's epoch polled);
//   - once the input stops, a leader with a confirmed epoch that every node
//     follows, within leaderAbove's wait. Under the fuzzing engine each
//     input has fuzzBudget (the engine kills a worker after 10 s on one
//     input); a cluster still unsettled then is waited for by the inputs
//     that follow, which send nothing, and the one that finds it unsettled
//     for longer than leaderAbove's wait fails, naming the input that
//     unsettled it.
//
// The seed corpus is every named attack (hostile.Attacks).
// CI runs it for 60 s (.ci/run); run longer with
// go test -run='^$' -fuzz=FuzzLiveCluster -fuzztime=30m ./election/
func FuzzLiveCluster(f *testing.F) {
	crashOutput(f)
	for i := range hostile.NumAttacks {
		f.Add(hostile.AttackSeed(i))
	}
	lc := newLiveCluster(f)
	f.Fuzz(func(t *testing.T, b []byte) { lc.run(t, b) })
}

// crashOutput sends the crash report of this process (an unrecovered panic
// or a fatal error, in any goroutine) to a file of its own under
// $TERMFENCE_FUZZ_CRASH_DIR as well as to standard error. go test discards a
// fuzz worker's standard error, so without it a raft goroutine's panic
// reads only "fuzzing process hung or terminated unexpectedly: exit status
// 2"; CI prints the files when the fuzz step fails.
func crashOutput(tb testing.TB) {
	dir := os.Getenv("TERMFENCE_FUZZ_CRASH_DIR")
	if dir == "" {
		return
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("crash-%d.txt", os.Getpid())))
	if err != nil {
		tb.Fatal(err)
	}
	if err := debug.SetCrashOutput(f, debug.CrashOptions{}); err != nil {
		tb.Fatal(err)
	}
	f.Close() // SetCrashOutput holds its own duplicate
}

// liveCluster is the cluster a fuzz worker attacks, and the attacker.
type liveCluster struct {
	c        *tcpCluster
	stranger raft.Transport
	view     hostile.View

	// budget bounds each input under the fuzzing engine, which kills a
	// worker whose input runs for 10 s ("deadlocked!", exit status 2,
	// nothing else: two CI runs failed so before this budget). Zero
	// outside the engine: each input then waits for the cluster to settle
	// for as long as leaderAbove does.
	budget time.Duration
	// unsettled is when the cluster last failed to settle within an
	// input's budget (zero: it settled after the last input), and culprit
	// that input. Later inputs send nothing until it settles, and fail
	// once it has been unsettled for as long as leaderAbove waits.
	unsettled time.Time
	culprit   []byte
}

// fuzzBudget is the time an input may take under the fuzzing engine: its
// RPCs are sent in the first half, and the cluster has the rest to settle.
const fuzzBudget = 6 * time.Second

// sendTimeout bounds each hostile RPC (the attacker's transport's own
// timeout, and a raw frame's).
const sendTimeout = 2 * time.Second

func newLiveCluster(tb testing.TB) *liveCluster {
	c := newTCPCluster(tb, []string{"z1", "z2", "z3"}, nil)
	stranger, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, sendTimeout, io.Discard)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = stranger.Close() })
	c.leaderAbove(0)
	view := hostile.View{Self: string(stranger.LocalAddr())}
	for _, nd := range c.nodes {
		view.Members = append(view.Members, hostile.Peer{ID: nd.id, Addr: nd.addr, Voter: true})
	}
	view.Term = func(i int) uint64 { return c.nodes[i].el.Raft().CurrentTerm() }
	view.LastIndex = func(i int) uint64 { idx, _ := lastLog(c.nodes[i]); return idx }
	view.Leader = func() int {
		for i, nd := range c.nodes {
			if nd.el.Raft().State() == raft.Leader {
				return i
			}
		}
		return -1
	}
	lc := &liveCluster{c: c, stranger: stranger, view: view}
	if fuzzing() {
		lc.budget = fuzzBudget
	}
	return lc
}

// fuzzing reports whether this process runs inputs for the fuzzing engine
// (go test -fuzz), as a worker or as the coordinator.
func fuzzing() bool {
	// A worker runs with the coordinator's flags plus -test.fuzzworker.
	f := flag.Lookup("test.fuzz")
	return f != nil && f.Value.String() != ""
}

// settle waits until a leader with a confirmed epoch is followed by every
// node, or until deadline (zero: as long as leaderAbove waits, failing the
// cluster's test then), and reports whether it came.
func (lc *liveCluster) settle(deadline time.Time) bool {
	if deadline.IsZero() {
		lc.c.leaderAbove(0)
		return true
	}
	return pollUntil(deadline, func() bool { _, _, ok := lc.c.settledAbove(0); return ok })
}

// run delivers the RPCs of input b and checks the oracles.
func (lc *liveCluster) run(t testing.TB, b []byte) {
	c, stranger, view := lc.c, lc.stranger, lc.view
	c.t = t
	start := time.Now()
	var deadline, sendBy time.Time
	if lc.budget > 0 {
		deadline, sendBy = start.Add(lc.budget), start.Add(lc.budget/2)
	}
	if !lc.unsettled.IsZero() {
		// An earlier input left the cluster unsettled: this one only waits.
		if !lc.settle(deadline) {
			if d := time.Since(lc.unsettled); d > settleWait {
				t.Fatalf("no leader followed by all for %v since input %x (this input %x sent nothing)\nlast state:%s", d, lc.culprit, b, c.stateLines())
			}
			return
		}
		// Settled, but part of this input's budget is gone: the next
		// input sends.
		t.Logf("the cluster settled %v after input %x", time.Since(lc.unsettled), lc.culprit)
		lc.unsettled, lc.culprit = time.Time{}, nil
		return
	}
	ops := hostile.Generate(b, view)
	before := c.maxTerm()
	sent := 0
	for _, op := range ops {
		if !sendBy.IsZero() && time.Now().After(sendBy) {
			t.Logf("sent %d of %d RPCs within %v", sent, len(ops), lc.budget/2)
			break
		}
		err := hostile.Send(stranger, c.nodes[op.Target].addr, op, sendTimeout)
		sent++
		if err == nil && op.MustRefuse {
			t.Errorf("%s to %s: admitted", op.Name, c.nodes[op.Target].id)
		}
	}
	n := uint64(sent)
	for _, nd := range c.nodes {
		tm := nd.el.Raft().CurrentTerm()
		if tm > before+n*TermWindow+1000 || tm > max(before, JumpLimit)+n+1000 {
			t.Errorf("%s at term %d after %d RPCs, from at most %d: beyond the window", nd.id, tm, n, before)
		}
		if ep, err := nd.el.Epoch(); err == nil {
			c.check.epoch("poll", nd.id, ep)
		}
	}
	settleStart := time.Now()
	if lc.settle(deadline) {
		if d := time.Since(settleStart); d > 10*c.et {
			t.Logf("a leader again after %v (%.0f election timeouts)", d, float64(d)/float64(c.et))
		}
	} else {
		lc.unsettled, lc.culprit = settleStart, append([]byte(nil), b...)
		t.Logf("no leader followed by all within this input's budget of %v; later inputs wait. State:%s", lc.budget, c.stateLines())
	}
	for _, nd := range c.nodes {
		if ep, err := nd.el.Epoch(); err == nil {
			c.check.epoch("poll", nd.id, ep)
		}
	}
	if v := c.check.violations(); len(v) > 0 {
		t.Fatalf("invariants broken: %v", fmt.Sprint(v))
	}
}

// stateLines is one line per node, for a failure's report: its term,
// state, leader, log, commit, applied index and last contact.
func (c *tcpCluster) stateLines() string {
	var b strings.Builder
	for _, nd := range c.nodes {
		st := nd.el.Raft().Stats()
		_, lid := nd.el.Raft().LeaderWithID()
		fmt.Fprintf(&b, "\n  %s: term %s, %s, leader %q, last log %s/%s, commit %s, applied %s, last contact %s, admission %+v",
			nd.id, st["term"], st["state"], lid, st["last_log_index"], st["last_log_term"], st["commit_index"],
			st["applied_index"], st["last_contact"], nd.el.Admission())
	}
	return b.String()
}

// TestLiveClusterRandom feeds FuzzLiveCluster's target random inputs for
// TERMFENCE_FUZZ_LOOP (a duration; skipped without it), outside the fuzzing
// engine: a long run whose panics print their stack.
func TestLiveClusterRandom(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("TERMFENCE_FUZZ_LOOP"))
	if err != nil {
		t.Skip("set TERMFENCE_FUZZ_LOOP=10m to run")
	}
	lc := newLiveCluster(t)
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	t.Logf("seed %d", seed)
	n := 0
	for deadline := time.Now().Add(d); time.Now().Before(deadline) && !t.Failed(); n++ {
		b := make([]byte, rng.Intn(200))
		rng.Read(b)
		lc.run(t, b)
		if t.Failed() {
			t.Logf("input %x", b)
		}
	}
	t.Logf("%d inputs in %v", n, d)
}
