package election

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/internal/raftlog"
	"github.com/termfence/termfence/internal/testwait"
	"github.com/termfence/termfence/transport"
)

// Test timing: hashicorp's own tests use 50 ms for all three. LLT must stay
// comfortably above an fsync, since heartbeats wait behind disk writes.
const (
	testHT   = 50 * time.Millisecond
	testET   = 50 * time.Millisecond
	testLLT  = 25 * time.Millisecond
	pollTick = 2 * time.Millisecond
)

// waitLong bounds every wait for a cluster-level condition: 30 s, scaled
// with the machine's load (internal/testwait). A bound, not a sleep: a
// wait ends as soon as its condition holds (a fixed 10 s once failed
// TestLeaderMeta on a loaded two-core machine).
var waitLong = testwait.Bound(30 * time.Second)

const testCluster = "test"

// waitFor polls cond until it holds or waitLong passes.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	waitForUpTo(tb, waitLong, what, cond)
}

// waitForUpTo polls cond until it holds or d passes.
func waitForUpTo(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	if !pollUntil(time.Now().Add(d), cond) {
		tb.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// pollUntil polls cond until it holds (true) or deadline passes (false).
func pollUntil(deadline time.Time, cond func() bool) bool {
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pollTick) // poll interval
	}
	return true
}

// other returns a node of c other than nd.
func (c *cluster) other(nd *node) *node {
	for _, o := range c.nodes {
		if o != nd {
			return o
		}
	}
	return nil
}

// cluster is an in-process cluster: every node on transport.NewFaulty over
// transport.NewInmem, with a real bolt store in a temp dir, and every node's
// Observe stream and Epoch() results fed to one invariant checker.
type cluster struct {
	tb    testing.TB
	nodes []*node
	check *checker
	// ht, et and llt are the nodes' timeouts (testHT, testET, testLLT
	// unless newClusterTimed set others).
	ht, et, llt time.Duration
	withMeta    bool // every node advertises metaOf(id)
	// configure, if set, adjusts each node's Config before it starts
	// (roles_test.go).
	configure func(nd *node, cfg *Config)

	// trip: see tripAbove.
	tripTerm atomic.Uint64 // 0: disarmed
	tripMu   sync.Mutex
	tripGot  map[string]uint64 // node -> the term it was cut off in
}

type node struct {
	c     *cluster
	id    string
	dir   string
	mem   *transport.Inmem
	net   *transport.Faulty
	el    *Election
	up    bool
	join  bool // started without Bootstrap: joins via AddVoter
	watch context.CancelFunc
	wg    sync.WaitGroup
}

// newCluster starts n bootstrapped nodes n1..nN. Cleanup stops them and
// reports every invariant violation the checker saw.
func newCluster(tb testing.TB, n int) *cluster {
	tb.Helper()
	return newClusterTimed(tb, n, testHT, testET, testLLT)
}

// newClusterTimed is newCluster with the given HeartbeatTimeout,
// ElectionTimeout and LeaderLeaseTimeout.
func newClusterTimed(tb testing.TB, n int, ht, et, llt time.Duration) *cluster {
	tb.Helper()
	return newClusterWith(tb, n, ht, et, llt, false)
}

// newMetaCluster is newCluster with every node advertising metaOf(id) as
// its Config.Meta.
func newMetaCluster(tb testing.TB, n int) *cluster {
	tb.Helper()
	return newClusterWith(tb, n, testHT, testET, testLLT, true)
}

// metaOf is the Config.Meta of node id in a newMetaCluster.
func metaOf(id string) string { return "http://" + id + ".app.test:8080" }

func newClusterWith(tb testing.TB, n int, ht, et, llt time.Duration, withMeta bool) *cluster {
	tb.Helper()
	c := &cluster{tb: tb, check: newChecker(testCluster), ht: ht, et: et, llt: llt, withMeta: withMeta}
	for i := range n {
		id := fmt.Sprintf("n%d", i+1)
		c.nodes = append(c.nodes, &node{c: c, id: id, dir: tb.TempDir()})
	}
	tb.Cleanup(func() {
		for _, nd := range c.nodes {
			if nd.up {
				c.stop(nd)
			}
		}
		c.check.verify(tb)
		if tb.Failed() {
			c.check.dumpLog(tb)
		}
	})
	for _, nd := range c.nodes {
		c.start(nd)
	}
	return c
}

func (c *cluster) bootstrap() []Server {
	var s []Server
	for _, nd := range c.nodes {
		if nd.join {
			continue
		}
		s = append(s, Server{ID: nd.id, Addr: nd.id})
	}
	return s
}

func (c *cluster) config(nd *node) Config {
	boot := c.bootstrap()
	if nd.join {
		boot = nil
	}
	meta := ""
	if c.withMeta {
		meta = metaOf(nd.id)
	}
	return Config{
		ID:                 nd.id,
		Meta:               meta,
		Cluster:            testCluster,
		DataDir:            nd.dir,
		Transport:          nd.net,
		Bootstrap:          boot,
		HeartbeatTimeout:   c.ht,
		ElectionTimeout:    c.et,
		LeaderLeaseTimeout: c.llt,
		Logger:             c.check.logger(nd.id),
	}
}

// join starts a new node with no Bootstrap, connected to every running node.
func (c *cluster) join(id string) *node {
	nd := &node{c: c, id: id, dir: c.tb.TempDir(), join: true}
	c.nodes = append(c.nodes, nd)
	c.start(nd)
	return nd
}

// start (re)starts nd on its data dir with a fresh transport connected to
// every running node.
func (c *cluster) start(nd *node) {
	c.tb.Helper()
	nd.mem = transport.NewInmem(nd.id)
	for _, o := range c.nodes {
		if o != nd && o.up {
			nd.mem.Connect(o.mem)
		}
	}
	nd.net = transport.NewFaulty(nd.mem)
	cfg := c.config(nd)
	cfg.Transport = tripwire{Faulty: nd.net, c: c, id: nd.id}
	if c.configure != nil {
		c.configure(nd, &cfg)
	}
	el, err := New(cfg)
	if err != nil {
		_ = nd.net.Close()
		c.tb.Fatalf("New(%s): %v", nd.id, err)
	}
	nd.el = el
	nd.up = true
	ctx, cancel := context.WithCancel(context.Background())
	nd.watch = cancel
	nd.wg.Add(2)
	go func() { // every Leadership this node reports
		defer nd.wg.Done()
		for l := range el.Observe(ctx) {
			c.check.leadership(nd.id, l)
		}
	}()
	go func() { // Epoch() polled concurrently with everything else
		defer nd.wg.Done()
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if ep, err := el.Epoch(); err == nil {
					c.check.epoch("poll", nd.id, ep)
				}
			}
		}
	}()
}

func (c *cluster) unwatch(nd *node) {
	nd.watch()
	nd.wg.Wait()
}

func (c *cluster) byID(id string) *node {
	for _, nd := range c.nodes {
		if nd.id == id {
			return nd
		}
	}
	c.tb.Fatalf("no node %s", id)
	return nil
}

// stop closes nd gracefully (a leader hands over first).
func (c *cluster) stop(nd *node) {
	c.tb.Helper()
	c.unwatch(nd)
	for _, o := range c.nodes {
		if o != nd && o.up {
			nd.mem.Disconnect(o.mem)
		}
	}
	if err := nd.el.Close(); err != nil {
		c.tb.Errorf("Close(%s): %v", nd.id, err)
	}
	nd.up = false
}

// crash stops nd with no handover: raft and transport shut down at once.
func (c *cluster) crash(nd *node) {
	c.tb.Helper()
	c.unwatch(nd)
	if err := nd.el.Raft().Shutdown().Error(); err != nil {
		c.tb.Errorf("shutdown %s: %v", nd.id, err)
	}
	for _, o := range c.nodes {
		if o != nd && o.up {
			nd.mem.Disconnect(o.mem)
		}
	}
	if err := nd.el.Close(); err != nil {
		c.tb.Errorf("Close(%s): %v", nd.id, err)
	}
	nd.up = false
}

// epochOf returns nd's Epoch() and, when it succeeds, hands it to the
// checker. Every epoch a test waits for is checked here, on the test's own
// goroutine, before the test can act on it: the background pollers of
// start may not have run yet when a short test ends (TestWakeOrder did, and
// its checker then saw no epoch at all).
func (c *cluster) epochOf(nd *node) (epoch.Epoch, error) {
	ep, err := nd.el.Epoch()
	if err == nil {
		c.check.epoch("wait", nd.id, ep)
	}
	return ep, err
}

// quietly runs scenario until it returns nil, for a scenario whose outcome
// holds only if raft starts no election on its own meanwhile (a transfer's
// target wins the very next term, say). On a loaded machine raft may do just
// that, from a timeout (see disturbances). If scenario fails and raft logged
// a disturbance during it, or within 2*ElectionTimeout before it (an
// election already under way when it started), the attempt proved nothing
// and is repeated, until waitLong. A failure in a quiet cluster fails the
// test at once.
// errSlow marks a scenario error that load alone explains although raft
// logged no timeout: a leadership transfer whose target, made a candidate
// by the TimeoutNow, did not win within ElectionTimeout. quietly repeats
// such a scenario as it does one raft disturbed.
var errSlow = errors.New("too slow under load")

func (c *cluster) quietly(what string, scenario func() error) {
	c.tb.Helper()
	deadline := time.Now().Add(waitLong)
	for {
		start := time.Now()
		err := scenario()
		if err == nil {
			return
		}
		if !c.check.disturbedSince(start.Add(-2*testET)) && !errors.Is(err, errSlow) {
			c.tb.Fatalf("%s: %v", what, err)
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("%s: raft kept starting elections on its own for %v; last attempt: %v", what, waitLong, err)
		}
		c.tb.Logf("%s: raft started an election on its own meanwhile; again (%v)", what, err)
	}
}

// tripAbove arms (term > 0) or disarms (0) the cluster's tripwire: armed,
// every node that sends an AppendEntries of a term above term — which only
// a leader of that term does, first to replicate the no-op that would
// commit its term — is isolated before that RPC leaves, and recorded.
func (c *cluster) tripAbove(term uint64) {
	c.tripMu.Lock()
	defer c.tripMu.Unlock()
	c.tripTerm.Store(term)
	c.tripGot = make(map[string]uint64)
}

// tripped returns the nodes the tripwire cut off since it was armed, each
// with the term of its first AppendEntries.
func (c *cluster) tripped() map[string]uint64 {
	c.tripMu.Lock()
	defer c.tripMu.Unlock()
	return maps.Clone(c.tripGot)
}

// tripwire is a node's transport as raft sees it in the cluster tests: its
// Faulty, with AppendEntries watched for tripAbove.
type tripwire struct {
	*transport.Faulty
	c  *cluster
	id string
}

func (w tripwire) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if above := w.c.tripTerm.Load(); above != 0 && args.Term > above {
		w.Isolate() // before the Faulty looks at this RPC: it fails
		w.c.tripMu.Lock()
		if _, ok := w.c.tripGot[w.id]; !ok && w.c.tripTerm.Load() == above {
			w.c.tripGot[w.id] = args.Term
		}
		w.c.tripMu.Unlock()
	}
	return w.Faulty.AppendEntries(id, target, args, resp)
}

// leader waits until exactly one running node holds an epoch and returns it.
func (c *cluster) leader() (*node, epoch.Epoch) {
	c.tb.Helper()
	var ld *node
	var ep epoch.Epoch
	waitFor(c.tb, "a leader with an epoch", func() bool {
		ld = nil
		for _, nd := range c.nodes {
			if !nd.up {
				continue
			}
			if e, err := c.epochOf(nd); err == nil {
				if ld != nil {
					return false
				}
				ld, ep = nd, e
			}
		}
		return ld != nil
	})
	return ld, ep
}

// leaderAbove waits for a node other than except holding an epoch newer
// than term.
func (c *cluster) leaderAbove(term uint64, except *node) (*node, epoch.Epoch) {
	c.tb.Helper()
	var ld *node
	var ep epoch.Epoch
	waitFor(c.tb, fmt.Sprintf("a leader with a term above %d", term), func() bool {
		for _, nd := range c.nodes {
			if nd == except || !nd.up {
				continue
			}
			if e, err := c.epochOf(nd); err == nil && e.Term > term {
				ld, ep = nd, e
				return true
			}
		}
		return false
	})
	return ld, ep
}

// checker records what every node claims and what raft actually did, and
// collects every violation of the epoch invariants:
//
//   - a node hands out epoch T only if raft logged that it won the election
//     for term T (I1), and the epoch names this cluster and this node;
//   - no two nodes ever hold an epoch of the same term;
//   - each node's epochs only move up: in its Observe stream each new
//     leadership's epoch has a higher term than the previous one, and
//     polled Epoch() results never go back;
//   - a node's reported Term never decreases, and a Leadership carries an
//     Epoch only if Self.
type checker struct {
	cluster string

	mu        sync.Mutex
	won       map[string]map[uint64]bool // node -> terms raft logged it won
	holder    map[uint64]string          // term -> node seen holding its epoch
	lastEpoch map[string]uint64          // source/node -> last epoch term
	lastTerm  map[string]uint64          // node -> last Leadership.Term
	lastObs   map[string]Leadership      // node -> last Leadership observed
	maxTerm   uint64                     // highest epoch term seen
	epochs    int                        // epoch sightings
	unrest    []time.Time                // when raft logged a disturbance
	unrestBy  []string                   // on which node (same index)
	unrestMsg []string                   // raft's message (same index)
	cands     []candidacy                // every "entering candidate state" raft logged
	errs      []string
	tail      []string // the last log lines of every node, for a failing test
}

// tailLines is how many log lines a failing cluster test prints.
const tailLines = 300

func newChecker(cluster string) *checker {
	return &checker{
		cluster:   cluster,
		won:       make(map[string]map[uint64]bool),
		holder:    make(map[uint64]string),
		lastEpoch: make(map[string]uint64),
		lastTerm:  make(map[string]uint64),
		lastObs:   make(map[string]Leadership),
	}
}

func (c *checker) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

// elected records that raft on node won the election for term (taken from
// raft's own "election won" log line, written on raft's main goroutine
// just before it enters the Leader state).
func (c *checker) elected(node string, term uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.won[node] == nil {
		c.won[node] = make(map[uint64]bool)
	}
	c.won[node][term] = true
}

func (c *checker) epoch(src, node string, ep epoch.Epoch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epochLocked(src, node, ep, false)
}

func (c *checker) epochLocked(src, node string, ep epoch.Epoch, strict bool) {
	c.epochs++
	if ep.Cluster != c.cluster || ep.Leader != node {
		c.fail("%s: %s handed out %v, which names another cluster or node", src, node, ep)
	}
	if !c.won[node][ep.Term] {
		c.fail("%s: %s handed out %v but never won term %d", src, node, ep, ep.Term)
	}
	if h, ok := c.holder[ep.Term]; ok && h != node {
		c.fail("%s: %s and %s both held an epoch of term %d", src, h, node, ep.Term)
	}
	c.holder[ep.Term] = node
	key := src + "/" + node
	last := c.lastEpoch[key]
	if ep.Term < last || strict && ep.Term == last {
		c.fail("%s: %s's epoch went from term %d to %v", src, node, last, ep)
	}
	c.lastEpoch[key] = ep.Term
	c.maxTerm = max(c.maxTerm, ep.Term)
}

func (c *checker) leadership(node string, l Leadership) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.Term < c.lastTerm[node] {
		c.fail("observe: %s's term went from %d to %d", node, c.lastTerm[node], l.Term)
	}
	c.lastTerm[node] = l.Term
	prev := c.lastObs[node]
	c.lastObs[node] = l
	if l.Epoch.IsZero() {
		return
	}
	if !l.Self || l.LeaderID != node || l.Term != l.Epoch.Term {
		c.fail("observe: %s reported %+v: an epoch without being the leader of its term", node, l)
	}
	// The same epoch is observed again only when nothing but the leader's
	// replicated metadata changed.
	again := prev.Epoch == l.Epoch && prev.LeaderMeta != l.LeaderMeta
	c.epochLocked("observe", node, l.Epoch, !again)
}

// disturbed records that raft logged one of disturbances.
func (c *checker) disturbed(node, msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unrest = append(c.unrest, time.Now())
	c.unrestBy = append(c.unrestBy, node)
	c.unrestMsg = append(c.unrestMsg, msg)
}

// disturbedSince reports whether raft logged a disturbance at or after t.
func (c *checker) disturbedSince(t time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.unrest) > 0 && !c.unrest[len(c.unrest)-1].Before(t)
}

// disturbedBetween reports whether raft logged a disturbance in [from, to]
// on a node other than except — or on except, a leader's lease lapsing
// (except's other timeouts are the fault's doing when it is the follower
// cut off from its leader; once it leads, its lease lapses as any
// leader's).
func (c *checker) disturbedBetween(from, to time.Time, except string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, at := range c.unrest {
		if !at.Before(from) && !at.After(to) && (c.unrestBy[i] != except || c.unrestMsg[i] == leaseLapsed) {
			return true
		}
	}
	return false
}

// holderOf returns the node seen holding an epoch of term, or "".
func (c *checker) holderOf(term uint64) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.holder[term]
}

// highest returns the highest epoch term seen so far.
func (c *checker) highest() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.maxTerm
}

func (c *checker) violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.errs...)
}

func (c *checker) verify(tb testing.TB) {
	tb.Helper()
	for _, e := range c.violations() {
		tb.Errorf("invariant violated: %s", e)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.epochs == 0 {
		tb.Errorf("checker saw no epoch at all: it checked nothing")
	}
}

// logger returns node's logger: raft's "election won" lines feed the
// checker; everything is echoed to stderr when TERMFENCE_TEST_LOG is set.
func (c *checker) logger(node string) *slog.Logger {
	var echo io.Writer = io.Discard
	if os.Getenv("TERMFENCE_TEST_LOG") != "" {
		echo = os.Stderr
	}
	// raftlog.LevelInfo: raft's Info, where "election won" is.
	return slog.New(slog.NewJSONHandler(&wonWriter{c: c, node: node, echo: echo}, &slog.HandlerOptions{Level: raftlog.LevelInfo})).With("node", node)
}

// record keeps the last tailLines log lines.
func (c *checker) record(p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, line := range bytes.Split(bytes.TrimSpace(p), []byte("\n")) {
		if len(line) > 0 {
			c.tail = append(c.tail, string(line))
		}
	}
	if n := len(c.tail); n > 2*tailLines {
		c.tail = append(c.tail[:0], c.tail[n-tailLines:]...)
	}
}

// dumpLog prints the last log lines of every node.
func (c *checker) dumpLog(tb testing.TB) {
	c.mu.Lock()
	defer c.mu.Unlock()
	lines := c.tail[max(0, len(c.tail)-tailLines):]
	tb.Logf("last %d log lines of the cluster:\n%s", len(lines), strings.Join(lines, "\n"))
}

// wonWriter parses slog's JSON lines for raft's "election won".
type wonWriter struct {
	c    *checker
	node string
	echo io.Writer
}

func (w *wonWriter) Write(p []byte) (int, error) {
	_, _ = w.echo.Write(p)
	w.c.record(p)
	for _, line := range bytes.Split(p, []byte("\n")) {
		if !bytes.Contains(line, []byte(`"election won"`)) && !containsAny(line, disturbances) && !bytes.Contains(line, []byte(enteringCandidate)) {
			continue
		}
		var rec struct {
			Msg  string `json:"msg"`
			Term uint64 `json:"term"`
		}
		if err := json.Unmarshal(line, &rec); err != nil {
			continue
		}
		switch {
		case rec.Msg == "election won":
			w.c.elected(w.node, rec.Term)
		case slices.Contains(disturbances, rec.Msg):
			w.c.disturbed(w.node, rec.Msg)
		case rec.Msg == enteringCandidate:
			w.c.candidate(w.node, rec.Term)
		}
	}
	return len(p), nil
}

// disturbances are raft's log messages for an election raft starts on its
// own, from a timeout: a leader that has not heard from a quorum for
// LeaderLeaseTimeout, a follower that has not heard from a leader for
// HeartbeatTimeout (also when the waker wakes it), a candidate whose
// election took ElectionTimeout. In a quiet cluster none is logged; on a
// loaded machine, where a goroutine can wait tens of milliseconds for a
// core, any may be.
var disturbances = []string{
	leaseLapsed,
	"heartbeat timeout reached, starting election",
	"Election timeout reached, restarting election",
}

// leaseLapsed is raft's message for a leader that steps down because it has
// not heard from a quorum for LeaderLeaseTimeout.
const leaseLapsed = "failed to contact quorum of nodes, stepping down"

func containsAny(line []byte, msgs []string) bool {
	for _, m := range msgs {
		if bytes.Contains(line, []byte(m)) {
			return true
		}
	}
	return false
}

// stateOf is a shorthand for a node's raft state.
func stateOf(nd *node) raft.RaftState { return nd.el.Raft().State() }
