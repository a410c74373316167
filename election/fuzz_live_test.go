package election

import (
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"runtime/debug"
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
//     follows, within leaderWait.
//
// The seed corpus is every attack of issues 16 and 25 (hostile.Attacks).
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
}

func newLiveCluster(tb testing.TB) *liveCluster {
	c := newTCPCluster(tb, []string{"z1", "z2", "z3"}, nil)
	stranger, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 2*time.Second, io.Discard)
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
	return &liveCluster{c: c, stranger: stranger, view: view}
}

// run delivers the RPCs of input b and checks the oracles.
func (lc *liveCluster) run(t testing.TB, b []byte) {
	c, stranger, view := lc.c, lc.stranger, lc.view
	c.t = t
	ops := hostile.Generate(b, view)
	before := c.maxTerm()
	for _, op := range ops {
		err := hostile.Send(stranger, c.nodes[op.Target].addr, op, 5*time.Second)
		if err == nil && op.MustRefuse {
			t.Errorf("%s to %s: admitted", op.Name, c.nodes[op.Target].id)
		}
	}
	n := uint64(len(ops))
	for _, nd := range c.nodes {
		tm := nd.el.Raft().CurrentTerm()
		if tm > before+n*TermWindow+1000 || tm > max(before, JumpLimit)+n+1000 {
			t.Errorf("%s at term %d after %d RPCs, from at most %d: beyond the window", nd.id, tm, n, before)
		}
		if ep, err := nd.el.Epoch(); err == nil {
			c.check.epoch("poll", nd.id, ep)
		}
	}
	start := time.Now()
	c.leaderAbove(0)
	if d := time.Since(start); d > 10*c.et {
		t.Logf("a leader again after %v (%.0f election timeouts)", d, float64(d)/float64(c.et))
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
