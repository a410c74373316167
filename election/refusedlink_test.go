package election

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/internal/testwait"
	"github.com/termfence/termfence/transport"
)

// refusedLinkHold is how long the refused-link tests hold the fault: 60 s
// (the figure in docs/PERFORMANCE.md) with TERMFENCE_LONG set, a few seconds otherwise so
// that CI stays fast. The verdicts are the same either way.
func refusedLinkHold(short time.Duration) time.Duration {
	if os.Getenv("TERMFENCE_LONG") != "" {
		return 60 * time.Second
	}
	return short
}

// leaderTrace samples who leads, every millisecond: the fraction of samples
// in which some node led, and the terms of the leaders seen, in order.
type leaderTrace struct {
	samples, led int
	terms        []uint64
	changed      []time.Time // when each leader change was seen
}

// sample records one look: ok if some node leads, in term.
func (l *leaderTrace) sample(term uint64, ok bool) {
	l.samples++
	if !ok {
		return
	}
	l.led++
	if len(l.terms) == 0 || l.terms[len(l.terms)-1] != term {
		if len(l.terms) > 0 {
			l.changed = append(l.changed, time.Now())
		}
		l.terms = append(l.terms, term)
	}
}

// changes is the number of leader changes seen.
func (l *leaderTrace) changes() int { return max(len(l.terms)-1, 0) }

func (l *leaderTrace) fraction() float64 {
	if l.samples == 0 {
		return 0
	}
	return float64(l.led) / float64(l.samples)
}

// unexplained counts the leader changes that no raft timeout explains: a
// change is explained when a node other than except logged one (a
// disturbance: check), or except's lease lapsed while it led, between the
// previous change (or from, or the candidacy that won the previous term if
// later) and the start of the candidacy that won the new term (the last one for that term raft logged before the change was
// seen). On a loaded machine a leader's lease can lapse, or a follower's
// heartbeat timeout pass, whatever the link between the leader and except
// does; raw raft suffers the same, and the timeout comes before the
// candidacy it sets off. A change with no such timeout before it was made
// by the refused link: the timeouts that follow a candidacy (the deposed
// leader, cut off from the new one, timing out) are its effects, not its
// cause (counting those let a waker that stood on a refused
// probe alone pass as "too loaded to tell").
func (l *leaderTrace) unexplained(check *checker, from time.Time, except string) int {
	n := 0
	for i, at := range l.changed {
		began, ok := check.lastCandidacy(l.terms[i+1], at)
		if !ok {
			began = at
		}
		// The timeout that started the previous term's election (at
		// start-up, say) explains that term, not this change.
		if prev, ok := check.lastCandidacy(l.terms[i], at); ok && prev.After(from) {
			from = prev
		}
		if !check.disturbedBetween(from, began, except) {
			n++
		}
		from = at
	}
	return n
}

// refusedLinkVerdict applies the refused-link bars to one attempt of a
// refused-link test — at most one leader change, a leader with a confirmed
// epoch at least 95% of the time — and more: no change at all that a raft
// timeout elsewhere (load) does not explain. It reports whether to try
// again: the attempt's changes were all explained by load, which proves
// nothing either way (and costs the leader's time, so the 95% bar is judged
// only on an attempt without them); unjudged collects one line per such
// attempt. After refusedLinkAttempts of them the test fails with "could
// not judge", naming them: a test that cannot judge its machine says so
// loudly, it never passes unjudged.
func refusedLinkVerdict(t verdictT, attempt int, tf, rr *leaderTrace, unexplained int, disturbed bool, unjudged *[]string) (again bool) {
	t.Helper()
	t.Logf("termfence: %v", tf)
	t.Logf("raw raft:  %v", rr)
	switch {
	case unexplained > 0:
		t.Errorf("termfence changed leaders %d times under a refused link, %d of them with no raft timeout elsewhere to explain it (raw raft: %d changes)",
			tf.changes(), unexplained, rr.changes())
	case tf.changes() == 0 && (tf.fraction() >= 0.95 || !disturbed):
		if f := tf.fraction(); f < 0.95 {
			t.Errorf("termfence had a leader with a confirmed epoch %.1f%% of the time, want at least 95%%", 100*f)
		}
	default:
		// (Or no change, but the leader's time below 95% while raft timed
		// out on a node other than the cut-off follower: load again.)
		// Every change began with a candidacy that a raft timeout on
		// another node had set off before it (load; raw raft beside it is
		// as unsteady): the refused link caused none of them, and the 95%
		// bar, which load alone breaks, cannot be judged on this attempt.
		*unjudged = append(*unjudged, fmt.Sprintf("attempt %d: %d leader changes, each after a raft timeout elsewhere, a leader %.1f%% of the time (raw raft: %d changes)",
			attempt, tf.changes(), 100*tf.fraction(), rr.changes()))
		if attempt >= refusedLinkAttempts {
			t.Errorf("could not judge: %d attempts in a row had leader changes that raft timeouts elsewhere set off (load), so none could judge the refused link: %s",
				attempt, strings.Join(*unjudged, "; "))
			return false
		}
		t.Logf("%d leader changes, each after raft timed out on a node other than the cut-off follower (load): again", tf.changes())
		return true
	}
	return false
}

// verdictT is what refusedLinkVerdict uses of its *testing.T
// (TestRefusedLinkVerdict records it).
type verdictT interface {
	Helper()
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
}

// refusedLinkTimeouts returns the refused-link tests' raft timeouts — HT =
// ET = 200 ms, LLT = 100 ms on a quiet machine — and the hold,
// scaled by the machine's load (testwait.Factor, at most 4): on a loaded
// machine a 200 ms timeout passes by itself, and a leader change it sets
// off says nothing about the link, so without the scaling every attempt
// could be left unjudged. TERMFENCE_LONG's 60 s hold is not scaled.
func refusedLinkTimeouts(short time.Duration) (ht, et, llt, hold time.Duration) {
	f := min(testwait.Factor(), 4)
	scale := func(d time.Duration) time.Duration { return time.Duration(float64(d) * f) }
	return scale(200 * time.Millisecond), scale(200 * time.Millisecond), scale(100 * time.Millisecond), refusedLinkHold(scale(short))
}

// refusedLinkAttempts bounds the attempts of one refused-link case whose
// leader changes load explains; the next one fails the test.
const refusedLinkAttempts = 10

func (l *leaderTrace) String() string {
	return fmt.Sprintf("%d leader changes (terms %v), a leader %.1f%% of %d samples", l.changes(), l.terms, 100*l.fraction(), l.samples)
}

// rawNode is one node of a raw hashicorp/raft cluster (no election package:
// no waker, no admission layer), for comparison.
type rawNode struct {
	id  string
	mem *transport.Inmem
	net *transport.Faulty
	r   *raft.Raft
}

// newRawCluster starts n raw raft nodes r1..rN on in-memory transports
// behind Faulty, with in-memory stores and pre-vote on (raft's default).
func newRawCluster(t *testing.T, n int, ht, et, llt time.Duration) []*rawNode {
	t.Helper()
	var nodes []*rawNode
	var conf raft.Configuration
	for i := range n {
		id := fmt.Sprintf("r%d", i+1)
		nd := &rawNode{id: id, mem: transport.NewInmem(id)}
		for _, o := range nodes {
			nd.mem.Connect(o.mem)
		}
		nd.net = transport.NewFaulty(nd.mem)
		nodes = append(nodes, nd)
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(id)})
	}
	for _, nd := range nodes {
		rc := raft.DefaultConfig()
		rc.LocalID = raft.ServerID(nd.id)
		rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = ht, et, llt
		rc.Logger = hclog.NewNullLogger()
		store := raft.NewInmemStore()
		snaps := raft.NewInmemSnapshotStore()
		if err := raft.BootstrapCluster(rc, store, store, snaps, nd.net, conf); err != nil {
			t.Fatal(err)
		}
		r, err := raft.NewRaft(rc, nopFSM{}, store, store, snaps, nd.net)
		if err != nil {
			t.Fatal(err)
		}
		nd.r = r
	}
	t.Cleanup(func() {
		for _, nd := range nodes {
			_ = nd.r.Shutdown().Error()
		}
	})
	return nodes
}

// rawLeader returns the raw cluster's leader and its term, if exactly one
// node leads.
func rawLeader(nodes []*rawNode) (*rawNode, uint64, bool) {
	var ld *rawNode
	for _, nd := range nodes {
		if nd.r.State() == raft.Leader {
			if ld != nil {
				return nil, 0, false
			}
			ld = nd
		}
	}
	if ld == nil {
		return nil, 0, false
	}
	return ld, ld.r.CurrentTerm(), true
}

// TestRefusedLinkKeepsLeader is a refused link, in the transport
// (transport.Faulty.Refuse: every RPC and every probe between the leader and
// one follower is refused, as by a firewall that rejects; see
// TestRefusedLinkKernel for the same with a real kernel refusal): the link
// is held, then healed, with raw hashicorp/raft beside it under the same
// fault. termfence must change leaders at most once and have a leader
// holding a confirmed epoch at least 95% of the time — and
// in fact not at all, as raw raft with pre-vote: a change that no timeout
// elsewhere explains fails the test, and an attempt whose changes all
// follow raft timeouts on other nodes (load) is repeated, and after
// refusedLinkAttempts of them the test fails as unable to judge
// (refusedLinkVerdict). Without the waker's evidence rule the follower whose dial
// to the leader was refused handed its raft a TimeoutNow and won with the
// third node's vote; the old leader, now a follower that could not reach
// it, did the same in turn (and lost only when its log was behind), and
// deposed the new leader with its higher term once the link healed.
func TestRefusedLinkKeepsLeader(t *testing.T) {
	ht, et, llt, hold := refusedLinkTimeouts(3 * time.Second)
	t.Logf("HT = %v, ET = %v, LLT = %v, hold %v (load factor %.2f)", ht, et, llt, hold, testwait.Factor())
	// Each follower's link in turn: the first in the wake order announces
	// its refused probe and never stands; the last is the one that can
	// win, and must not stand without a majority's evidence (once
	// only the first was ever cut, and a waker that stood on its own
	// refused probe passed).
	for _, cut := range []int{0, 1} {
		t.Run(fmt.Sprintf("follower-%d", cut+1), func(t *testing.T) {
			var unjudged []string
			for attempt := 1; ; attempt++ {
				var tf, rr leaderTrace
				var unexplained int
				var disturbed bool
				t.Run(fmt.Sprintf("attempt-%d", attempt), func(t *testing.T) {
					tf, rr, unexplained, disturbed = refusedLinkInmem(t, ht, et, llt, hold, cut)
				})
				if !refusedLinkVerdict(t, attempt, &tf, &rr, unexplained, disturbed, &unjudged) {
					return
				}
			}
		})
	}
}

// refusedLinkInmem runs one attempt of TestRefusedLinkKeepsLeader and
// returns both traces, the number of termfence's leader changes that no
// raft timeout on a node other than the cut-off follower explains, and
// whether such a timeout happened during the trace at all.
func refusedLinkInmem(t *testing.T, ht, et, llt, hold time.Duration, cut int) (tf, rr leaderTrace, unexplained int, disturbed bool) {
	c := newClusterTimed(t, 3, ht, et, llt)
	raw := newRawCluster(t, 3, ht, et, llt)

	ld, _ := c.leader()
	// a is the follower whose link is cut: the cut-th by ID (the first
	// announces its refused probe, the second can win).
	var fs []*node
	for _, nd := range c.nodes {
		if nd != ld {
			fs = append(fs, nd)
		}
	}
	slices.SortFunc(fs, func(x, y *node) int { return strings.Compare(x.id, y.id) })
	a := fs[cut]
	var rld *rawNode
	waitFor(t, "a raw leader", func() bool {
		rld, _, _ = rawLeader(raw)
		return rld != nil
	})
	var rfs []*rawNode
	for _, nd := range raw {
		if nd != rld {
			rfs = append(rfs, nd)
		}
	}
	slices.SortFunc(rfs, func(x, y *rawNode) int { return strings.Compare(x.id, y.id) })
	ra := rfs[cut]
	sampleUntil := func(end time.Time) {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for time.Now().Before(end) {
			<-tick.C // sampling interval
			var term uint64
			held := false
			for _, nd := range c.nodes {
				if ep, err := c.epochOf(nd); err == nil {
					term, held = ep.Term, true
				}
			}
			tf.sample(term, held)
			_, rterm, ok := rawLeader(raw)
			rr.sample(rterm, ok)
		}
	}
	// The trace begins here, before the fault: a change seen after it can
	// have been set off by a timeout in this lead-in (a leader's lease
	// lapsing under load just before the refusal).
	sampled := time.Now()
	sampleUntil(time.Now().Add(5 * ht)) // both lead before the fault; start-up is over
	a.net.Refuse(raft.ServerAddress(ld.id))
	ld.net.Refuse(raft.ServerAddress(a.id))
	ra.net.Refuse(raft.ServerAddress(rld.id))
	rld.net.Refuse(raft.ServerAddress(ra.id))
	t.Logf("refused link %s <-> %s (termfence), %s <-> %s (raw raft), held %v", ld.id, a.id, rld.id, ra.id, hold)
	sampleUntil(time.Now().Add(hold))
	a.net.Heal()
	ld.net.Heal()
	ra.net.Heal()
	rld.net.Heal()
	sampleUntil(time.Now().Add(10 * ht)) // and after the heal
	return tf, rr, tf.unexplained(c.check, sampled.Add(-et), a.id), c.check.disturbedBetween(sampled.Add(-et), time.Now(), a.id)
}

// enteringCandidate is raft's message for a node that stands (a pre-vote
// round or, after a TimeoutNow, a vote), with the term it stands for.
const enteringCandidate = "entering candidate state"

// candidacy is one "entering candidate state" raft logged.
type candidacy struct {
	at   time.Time
	node string
	term uint64
}

// candidate records that raft on node stood for term.
func (c *checker) candidate(node string, term uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cands = append(c.cands, candidacy{at: time.Now(), node: node, term: term})
}

// lastCandidacy returns when the last candidacy for term logged at or
// before t began; ok is false if there was none.
func (c *checker) lastCandidacy(term uint64, t time.Time) (last time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cd := range c.cands {
		if cd.term == term && !cd.at.After(t) && (!ok || cd.at.After(last)) {
			last, ok = cd.at, true
		}
	}
	return last, ok
}

// verdictRecorder records what refusedLinkVerdict reports.
type verdictRecorder struct{ errs []string }

func (*verdictRecorder) Helper()             {}
func (*verdictRecorder) Logf(string, ...any) {}
func (r *verdictRecorder) Errorf(f string, a ...any) {
	r.errs = append(r.errs, fmt.Sprintf(f, a...))
}

// TestRefusedLinkVerdict: the refused-link verdict on its own inputs. It
// fails a change no timeout elsewhere explains and a leader short of 95%
// on a quiet run; it passes only an attempt it could judge (no change,
// 95%); it repeats an attempt load explains, and after refusedLinkAttempts
// of them fails with "could not judge", naming them — never a pass
// unjudged.
func TestRefusedLinkVerdict(t *testing.T) {
	trace := func(terms []uint64, samples, led int) *leaderTrace {
		l := &leaderTrace{samples: samples, led: led, terms: terms}
		for range max(len(terms)-1, 0) {
			l.changed = append(l.changed, time.Now())
		}
		return l
	}
	steady, unsteady, leaderless := trace([]uint64{3}, 1000, 999), trace([]uint64{3, 4, 5}, 1000, 900), trace(nil, 100, 0)
	for _, c := range []struct {
		name        string
		tf          *leaderTrace
		unexplained int
		disturbed   bool
		again       bool
		fail        string // a substring of the failure; "" passes
	}{
		{"no change, a leader 99.9%", steady, 0, false, false, ""},
		{"no change, a leader 99.9%, raft timed out elsewhere", steady, 0, true, false, ""},
		{"a change the link made", unsteady, 1, true, false, "no raft timeout elsewhere"},
		{"no change, no leader, quiet", leaderless, 0, false, false, "want at least 95%"},
		{"no change, no leader, raft timed out elsewhere", leaderless, 0, true, true, ""},
		{"changes load explains", unsteady, 0, true, true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var r verdictRecorder
			var unjudged []string
			again := refusedLinkVerdict(&r, 1, c.tf, steady, c.unexplained, c.disturbed, &unjudged)
			if again != c.again {
				t.Errorf("again = %v, want %v", again, c.again)
			}
			switch {
			case c.fail == "" && len(r.errs) > 0:
				t.Errorf("failed: %v", r.errs)
			case c.fail != "" && (len(r.errs) != 1 || !strings.Contains(r.errs[0], c.fail)):
				t.Errorf("failures %q, want one with %q", r.errs, c.fail)
			}
		})
	}
	// Attempts that load explains, one after another: repeated until the
	// bound, then a failure naming each of them.
	var r verdictRecorder
	var unjudged []string
	for attempt := 1; ; attempt++ {
		again := refusedLinkVerdict(&r, attempt, unsteady, steady, 0, true, &unjudged)
		if !again {
			if attempt != refusedLinkAttempts {
				t.Fatalf("stopped after %d attempts, want %d", attempt, refusedLinkAttempts)
			}
			break
		}
		if len(r.errs) > 0 {
			t.Fatalf("attempt %d failed: %v", attempt, r.errs)
		}
	}
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "could not judge") ||
		!strings.Contains(r.errs[0], "attempt 1:") || !strings.Contains(r.errs[0], fmt.Sprintf("attempt %d:", refusedLinkAttempts)) {
		t.Fatalf("after %d unjudged attempts: %q, want one \"could not judge\" failure naming each attempt", refusedLinkAttempts, r.errs)
	}
}
