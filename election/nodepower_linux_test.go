package election

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/termfence/termfence/storageguard/fencetest/powerfs"
	"github.com/termfence/termfence/transport"
)

// Election nodes under power loss (docs/DESIGN.md I1 and I2).
// Three nodes run as child processes of the test binary over loopback TCP,
// each with its data directory on a powerfs disk of its own. The test cuts
// the power of a node at random points — while it leads, right after it
// granted a vote, while its term has just risen in an election — and
// restarts it. Each child reports on stdout (outside the mount) what its
// stores hold as it starts and every term, vote and epoch it reaches
// afterwards; every reported term and vote was read back from raft-boltdb,
// so it was persisted. The oracle:
//
//   - I1: no term is handed out as an epoch twice (by two nodes, or by one
//     node before and after a cut);
//   - I2: a node restarted after a cut holds a term and a vote term no
//     lower than any it reported before (the candidate is only logged: see
//     noteVote).
//
// The control opens raft-boltdb with NoSync (the test-only knob
// storeNoSync): then a cut must be seen to take a term or vote back.

const (
	envNodeChild  = "TERMFENCE_ELECTION_NODE_CHILD" // the child's server ID
	envNodeDir    = "TERMFENCE_ELECTION_NODE_DIR"
	envNodePeers  = "TERMFENCE_ELECTION_NODE_PEERS" // id=addr,id=addr,...
	envNodeNoSync = "TERMFENCE_ELECTION_NODE_NOSYNC"
)

// The children's timeouts: generous for three -race processes on a loaded
// machine; spurious elections only add cut points.
const (
	nodePowerHT  = 200 * time.Millisecond
	nodePowerET  = 200 * time.Millisecond
	nodePowerLLT = 100 * time.Millisecond
)

// nodeWait bounds each wait for an event: only so that a cluster that
// lost its liveness fails loudly instead of hanging. It elects within a
// few election timeouts.
const nodeWait = 45 * time.Second

// nodePoll is how often a child reads its term and vote back from its store.
const nodePoll = 5 * time.Millisecond

// runNodeChild plays an election node's part until the power goes (or the
// test ends it); where envNodeChild is unset it returns.
func runNodeChild() {
	id := os.Getenv(envNodeChild)
	if id == "" {
		return
	}
	fail := func(what string, err error) {
		fmt.Fprintf(os.Stderr, "node %s: %s: %v\n", id, what, err)
		os.Exit(1)
	}
	storeNoSync = os.Getenv(envNodeNoSync) != ""
	dir := os.Getenv(envNodeDir)

	// What the stores hold before raft starts: the state the cut left.
	n := &raftNode{}
	_, stable, _, err := n.openStores(Config{DataDir: dir})
	if err != nil {
		fail("open stores", err)
	}
	term, vt, cand := readTermVote(stable.GetUint64, stable.Get)
	if err := n.closeStores(); err != nil {
		fail("close stores", err)
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	say("start %d %d %s", term, vt, cand)

	var boot []Server
	var addr string
	for _, p := range strings.Split(os.Getenv(envNodePeers), ",") {
		pid, a, _ := strings.Cut(p, "=")
		boot = append(boot, Server{ID: pid, Addr: a})
		if pid == id {
			addr = a
		}
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	tr, err := transport.NewTCP(addr, "", transport.Config{Logger: quiet})
	if err != nil {
		fail("listen", err)
	}
	el, err := New(Config{
		ID: id, Cluster: "power", DataDir: dir, Transport: tr, Bootstrap: boot,
		HeartbeatTimeout: nodePowerHT, ElectionTimeout: nodePowerET, LeaderLeaseTimeout: nodePowerLLT,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		fail("New", err)
	}
	go func() {
		for l := range el.Observe(context.Background()) {
			if l.Leading() {
				say("lead %d", l.Epoch.Term)
			}
		}
	}()
	for {
		t, v, c := readTermVote(el.bolt.GetUint64, el.bolt.Get)
		if t != term || v != vt || c != cand {
			// bbolt's readers see a commit's meta page once it is
			// written, before its fdatasync returns: what was read is
			// durable only once that commit has returned. A write of
			// our own takes bbolt's writer lock, which the commit holds
			// until then.
			if err := el.bolt.SetUint64([]byte("termfence-test-probe"), t); err != nil {
				fail("probe write", err)
			}
		}
		if t != term {
			term = t
			say("term %d", t)
		}
		if v != vt || c != cand {
			vt, cand = v, c
			say("vote %d %s", v, c)
		}
		time.Sleep(nodePoll) // a poll of the store, not a wait for an event
	}
}

// readTermVote reads raft's persisted term, vote term and vote candidate
// ("-" for none) with a stable store's getters.
func readTermVote(getUint func([]byte) (uint64, error), get func([]byte) ([]byte, error)) (term, voteTerm uint64, cand string) {
	term, _ = getUint([]byte("CurrentTerm"))
	voteTerm, _ = getUint([]byte("LastVoteTerm"))
	c, _ := get([]byte("LastVoteCand"))
	cand = string(c)
	if cand == "" {
		cand = "-"
	}
	return term, voteTerm, cand
}

// nodeEvent is one line a child reported.
type nodeEvent struct {
	node, inc int // node index, incarnation
	kind      string
	term      uint64 // start: term; term: term; vote: vote term; lead: term
	voteTerm  uint64 // start only
	cand      string // start and vote
	err       error  // the child's output ended (it died)
}

// powerNodes is the test's side of the three children.
type powerNodes struct {
	t      *testing.T
	noSync bool
	ids    []string
	peers  string
	disks  []*powerfs.Disk
	cmds   []*exec.Cmd
	incs   []int
	events chan nodeEvent
	done   chan struct{} // closed at cleanup: readers stop sending

	// The oracle's record.
	maxTerm  []uint64
	maxVote  []uint64
	voteCand []string
	leaders  map[uint64]string // term -> "n2#3" (node and incarnation)
	lastLead *nodeEvent        // the latest epoch handed out
	started  []int             // per node, the incarnation whose start line was checked
	bad      []string
}

func newPowerNodes(t *testing.T, noSync bool) *powerNodes {
	t.Helper()
	p := &powerNodes{t: t, noSync: noSync, events: make(chan nodeEvent, 256), done: make(chan struct{}), leaders: map[uint64]string{}}
	var peers []string
	for i := range 3 {
		id := fmt.Sprintf("n%d", i+1)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		p.ids = append(p.ids, id)
		peers = append(peers, id+"="+addr)
		p.disks = append(p.disks, powerfs.MountTest(t, powerfs.Options{}))
	}
	p.peers = strings.Join(peers, ",")
	p.cmds = make([]*exec.Cmd, 3)
	p.incs = make([]int, 3)
	p.maxTerm = make([]uint64, 3)
	p.maxVote = make([]uint64, 3)
	p.voteCand = make([]string, 3)
	p.started = make([]int, 3)
	t.Cleanup(func() {
		close(p.done)
		for _, c := range p.cmds {
			if c != nil {
				c.Process.Kill()
				c.Wait()
			}
		}
	})
	for i := range 3 {
		p.start(i)
	}
	return p
}

// start starts node i's next incarnation.
func (p *powerNodes) start(i int) {
	t := p.t
	t.Helper()
	p.incs[i]++
	inc := p.incs[i]
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		envNodeChild+"="+p.ids[i],
		envNodeDir+"="+filepath.Join(p.disks[i].Dir(), "data"),
		envNodePeers+"="+p.peers)
	if p.noSync {
		cmd.Env = append(cmd.Env, envNodeNoSync+"=1")
	}
	cmd.Stderr = &prefixWriter{t: t, prefix: fmt.Sprintf("%s#%d: ", p.ids[i], inc)}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.disks[i].Track(cmd.Process.Pid)
	p.cmds[i] = cmd
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			ev := nodeEvent{node: i, inc: inc}
			if len(f) > 0 {
				ev.kind = f[0]
			}
			num := func(k int) uint64 {
				if k >= len(f) {
					return 0
				}
				v, _ := strconv.ParseUint(f[k], 10, 64)
				return v
			}
			str := func(k int) string {
				if k >= len(f) {
					return ""
				}
				return f[k]
			}
			switch ev.kind {
			case "start":
				ev.term, ev.voteTerm, ev.cand = num(1), num(2), str(3)
			case "term", "lead":
				ev.term = num(1)
			case "vote":
				ev.term, ev.cand = num(1), str(2)
			default:
				ev.err = fmt.Errorf("unexpected line %q", sc.Text())
			}
			select {
			case p.events <- ev:
			case <-p.done:
				return
			}
		}
		select {
		case p.events <- nodeEvent{node: i, inc: inc, kind: "exit", err: io.EOF}:
		case <-p.done:
		}
	}()
}

// cut cuts node i's power (torn or not), records everything its process
// reported before it ended (all of it persisted before the cut), and
// starts its next incarnation.
func (p *powerNodes) cut(i int, torn bool) {
	t := p.t
	t.Helper()
	if err := p.disks[i].PowerCut(torn); err != nil {
		t.Fatalf("power cut of %s: %v", p.ids[i], err)
	}
	inc := p.incs[i]
	p.next("end of the cut process", func(ev nodeEvent) bool {
		return ev.node == i && ev.inc == inc && ev.kind == "exit"
	})
	p.cmds[i].Wait()
	p.start(i)
}

// stacks returns each live child's kernel stack, to tell a child blocked
// on a mount from a cluster that cannot elect.
func (p *powerNodes) stacks() string {
	var b strings.Builder
	for i, c := range p.cmds {
		if c == nil || c.Process == nil {
			continue
		}
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stack", c.Process.Pid))
		fmt.Fprintf(&b, "%s#%d (pid %d):\n%s\n", p.ids[i], p.incs[i], c.Process.Pid, st)
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", c.Process.Pid))
		for _, tk := range tasks {
			w, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/wchan", c.Process.Pid, tk.Name()))
			fmt.Fprintf(&b, "  task %s wchan %s\n", tk.Name(), w)
		}
	}
	return b.String()
}

// leader returns the latest leader: the node that handed out the newest
// epoch, if no node has reached a newer term since and it was not cut;
// otherwise the next node to hand out an epoch. (Waiting for the next one
// alone would wait forever on a cluster that keeps its leader.)
func (p *powerNodes) leader() (nodeEvent, bool) {
	if l := p.lastLead; l != nil && l.inc == p.incs[l.node] && l.term >= slices.Max(p.maxTerm) {
		return *l, true
	}
	return p.next("leader", func(ev nodeEvent) bool { return ev.kind == "lead" })
}

// failed reports whether the oracle has found something: the run stops.
func (p *powerNodes) failed() bool { return len(p.bad) > 0 }

// record feeds one event to the oracle.
func (p *powerNodes) record(ev nodeEvent) {
	id := fmt.Sprintf("%s#%d", p.ids[ev.node], ev.inc)
	i := ev.node
	switch ev.kind {
	case "start":
		if ev.term < p.maxTerm[i] {
			p.bad = append(p.bad, fmt.Sprintf("I2: %s started with term %d after it had persisted term %d", id, ev.term, p.maxTerm[i]))
		}
		if ev.voteTerm < p.maxVote[i] {
			p.bad = append(p.bad, fmt.Sprintf("I2: %s started with its vote in term %d (for %s) after it had voted in term %d (for %s)", id, ev.voteTerm, ev.cand, p.maxVote[i], p.voteCand[i]))
		}
		p.noteTerm(i, ev.term)
		p.noteVote(i, ev.voteTerm, ev.cand)
		p.started[i] = ev.inc
	case "term":
		p.noteTerm(i, ev.term)
	case "vote":
		p.noteVote(i, ev.term, ev.cand)
	case "lead":
		if prev, ok := p.leaders[ev.term]; ok {
			p.bad = append(p.bad, fmt.Sprintf("I1: epoch of term %d handed out by %s and by %s", ev.term, prev, id))
		} else {
			p.leaders[ev.term] = id
		}
		if p.lastLead == nil || ev.term > p.lastLead.term {
			p.lastLead = &ev
		}
	}
}

func (p *powerNodes) noteTerm(i int, term uint64) {
	p.maxTerm[i] = max(p.maxTerm[i], term)
}

// noteVote records a vote. Only its term is checked: raft persists the
// vote's term and its candidate in two writes (raft.go persistVote), so a
// poll may see the new term with the old candidate, and a cut may leave
// that pair on disk too.
func (p *powerNodes) noteVote(i int, term uint64, cand string) {
	if term > p.maxVote[i] {
		p.maxVote[i], p.voteCand[i] = term, cand
	}
}

// next returns the next event that match accepts from a live incarnation
// (or the exit match accepts), recording every event on the way. A
// child's death other than by a cut is a finding: next records it and
// returns false.
func (p *powerNodes) next(what string, match func(nodeEvent) bool) (nodeEvent, bool) {
	t := p.t
	t.Helper()
	// A bound that only turns a lost cluster into a loud failure instead
	// of a hang; the cluster elects within a few election timeouts.
	timeout := time.NewTimer(nodeWait)
	defer timeout.Stop()
	for {
		select {
		case ev := <-p.events:
			if match(ev) && ev.kind == "exit" {
				return ev, true // the end cut waits for
			}
			if ev.kind == "exit" && ev.inc == p.incs[ev.node] {
				// A node that cannot start on what the cut left (bbolt
				// panics on a torn page it never synced) lost its state.
				p.bad = append(p.bad, fmt.Sprintf("%s#%d exited without a power cut (see its log)", p.ids[ev.node], ev.inc))
				return ev, false
			}
			if ev.kind == "exit" {
				continue // a cut incarnation's end, already waited for
			}
			if ev.err != nil {
				t.Fatalf("%s#%d: %v", p.ids[ev.node], ev.inc, ev.err)
			}
			// Lines of a cut incarnation count for the oracle (they were
			// persisted before the cut) but are no cut points any more.
			p.record(ev)
			if ev.inc == p.incs[ev.node] && match(ev) {
				return ev, true
			}
		case <-timeout.C:
			st := p.stacks()
			for _, c := range p.cmds {
				c.Process.Signal(syscall.SIGQUIT) // goroutine dumps into the log
				c.Wait()
			}
			t.Fatalf("no %s within %v (terms %v); the children's kernel stacks:\n%s", what, nodeWait, p.maxTerm, st)
		}
	}
}

// runNodePower runs rounds of cuts and returns the oracle's findings. Each
// round cuts the leader once it leads, then, at random, a voter right
// after it grants a vote in the election that follows, or a node whose
// term has just risen before any leader of that term is known.
func runNodePower(t *testing.T, noSync bool, rounds int, seed uint64) []string {
	t.Helper()
	t.Logf("seed %d (TERMFENCE_NODEPOWER_SEED replays it)", seed)
	rng := rand.New(rand.NewPCG(seed, 31))
	p := newPowerNodes(t, noSync)
	pause := func() {
		// Where in the node's work the cut lands: at once, or a little later.
		if d := time.Duration(rng.IntN(int(nodePowerET / time.Millisecond))); rng.IntN(2) == 0 {
			time.Sleep(d * time.Millisecond)
		}
	}
	cuts := 0
	for r := 0; r < rounds && !p.failed(); r++ {
		lead, ok := p.leader()
		if !ok {
			break
		}
		pause()
		t.Logf("round %d: cutting %s, leader of term %d", r, p.ids[lead.node], lead.term)
		p.cut(lead.node, rng.IntN(2) == 0)
		cuts++
		var ev nodeEvent
		switch rng.IntN(3) {
		case 0: // a voter right after it granted a vote in a new term
			ev, ok = p.next("vote", func(ev nodeEvent) bool {
				return ev.kind == "vote" && ev.term > lead.term && ev.cand != p.ids[ev.node]
			})
			if ok {
				t.Logf("round %d: cutting %s, which voted in term %d", r, p.ids[ev.node], ev.term)
			}
		case 1: // a node whose term rose, while no leader of it is known
			// A child reports its term by polling its store, its
			// leadership as it happens: on a loaded machine the next
			// election can end before any term rise is seen, and no
			// further rise comes while that leader holds. A newer
			// leader therefore ends the wait too, and this round
			// cuts nobody more.
			ev, ok = p.next("election", func(ev nodeEvent) bool {
				if ev.kind == "lead" && ev.term > lead.term {
					return true
				}
				_, led := p.leaders[ev.term]
				return ev.kind == "term" && ev.term > lead.term && !led
			})
			if ok && ev.kind == "lead" {
				t.Logf("round %d: term %d elected %s before a rise to it was seen; no cut in its election", r, ev.term, p.ids[ev.node])
				continue
			}
			if ok {
				t.Logf("round %d: cutting %s in the election of term %d", r, p.ids[ev.node], ev.term)
			}
		default:
			continue
		}
		if !ok {
			break
		}
		pause()
		p.cut(ev.node, rng.IntN(2) == 0)
		cuts++
	}
	for i := range p.ids {
		// Every node's last restart is checked too.
		if !p.failed() && p.started[i] != p.incs[i] {
			p.next("start after the last cut", func(ev nodeEvent) bool { return ev.kind == "start" && ev.node == i })
		}
	}
	t.Logf("%d rounds, %d cuts, %d leaders, terms %v", rounds, cuts, len(p.leaders), p.maxTerm)
	return p.bad
}

func nodePowerSeed() uint64 {
	if s := os.Getenv("TERMFENCE_NODEPOWER_SEED"); s != "" {
		v, _ := strconv.ParseUint(s, 10, 64)
		return v
	}
	return uint64(time.Now().UnixNano())
}

// TestPowerCutNodes: three election nodes, power cuts at random points
// (leaders, voters right after their vote, nodes in an election), each cut
// node restarted; no epoch term is handed out twice and no node's term or
// vote goes back. 4 rounds in CI, 40 with TERMFENCE_LONG.
func TestPowerCutNodes(t *testing.T) {
	rounds := 8
	if os.Getenv("TERMFENCE_LONG") != "" {
		rounds = 40
	}
	if bad := runNodePower(t, false, rounds, nodePowerSeed()); len(bad) > 0 {
		t.Fatalf("invariants broken under power cuts:\n%s", strings.Join(bad, "\n"))
	}
}

// TestPowerCutNodesControl: the same with raft-boltdb's NoSync (the
// test-only knob storeNoSync) must see a term or vote go back, or a term
// handed out twice.
func TestPowerCutNodesControl(t *testing.T) {
	bad := runNodePower(t, true, 4, nodePowerSeed())
	if len(bad) == 0 {
		t.Fatal("control: with raft-boltdb's NoSync no term or vote was lost in 4 rounds: the test cannot see the loss")
	}
	t.Logf("control failed as it must: %s", bad[0])
}

// prefixWriter logs a child's stderr through t, line by line.
type prefixWriter struct {
	t      *testing.T
	prefix string
	mu     sync.Mutex
	buf    []byte
}

func (w *prefixWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			return len(b), nil
		}
		w.t.Log(w.prefix + string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
}
