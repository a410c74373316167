package election

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/storageguard/fencetest/powerfs"
)

// A randomized power-loss search over the environment a node starts in,
// not only over the instant of the cut. Each cut ends a child that
// started several nodes' stores, each in a data directory of its own whose
// path was left in a random state before the start: no directory made, or
// any number of its directories made by "another process" (os.MkdirAll,
// which syncs nothing), down to the data directory itself (systemd's
// StateDirectory=). Each node may start twice before it works (a clean
// restart), votes in a term, and may then take a snapshot and compact its
// log behind it, as raft does. After the cut a new process opens each
// node's stores and starts raft on them. The oracle, per node:
//
//   - the term and the vote it acknowledged are there (I3);
//   - a snapshot it acknowledged is there, whole, and raft restores it
//     (its log was compacted behind it: without it the node's state is
//     gone);
//   - raft starts on what the cut left (liveness).

const (
	envSearchChild  = "TERMFENCE_ELECTION_SEARCH_CHILD"
	envSearchTrials = "TERMFENCE_ELECTION_SEARCH_TRIALS"
)

// searchTrial is one node's environment and work in a search cut.
type searchTrial struct {
	dir      string // its data directory
	made     int    // how many directories of its path existed, unsynced, before the start
	depth    int    // how many directories of its path are below the trial's root
	reopen   bool   // started, closed and started again before the work
	snapshot bool   // takes a snapshot after its vote
	compact  bool   // and compacts its log behind it
	term     uint64
}

func (tr searchTrial) encode() string {
	b := func(v bool) string { return strconv.FormatBool(v) }
	return strings.Join([]string{tr.dir, b(tr.reopen), b(tr.snapshot), b(tr.compact), strconv.FormatUint(tr.term, 10)}, ";")
}

func decodeTrials(s string) []searchTrial {
	var out []searchTrial
	for _, item := range strings.Split(s, ",") {
		f := strings.Split(item, ";")
		if len(f) != 5 {
			continue
		}
		t, _ := strconv.ParseUint(f[4], 10, 64)
		out = append(out, searchTrial{dir: f[0], reopen: f[1] == "true", snapshot: f[2] == "true", compact: f[3] == "true", term: t})
	}
	return out
}

// searchSnapIndex is the log index every trial's snapshot covers.
const searchSnapIndex = 10

// runSearchChild plays a search child's part and exits; where
// envSearchChild is unset it returns.
func runSearchChild() {
	role := os.Getenv(envSearchChild)
	if role == "" {
		return
	}
	fail := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
		os.Exit(1)
	}
	trials := decodeTrials(os.Getenv(envSearchTrials))
	switch role {
	case "work":
		for i, tr := range trials {
			n := &raftNode{}
			if tr.reopen {
				if _, _, _, err := n.openStores(Config{DataDir: tr.dir}); err != nil {
					fail("trial %d: first start: %v", i, err)
				}
				if err := n.closeStores(); err != nil {
					fail("trial %d: close: %v", i, err)
				}
				n = &raftNode{}
			}
			logs, stable, snaps, err := n.openStores(Config{DataDir: tr.dir})
			if err != nil {
				fail("trial %d: open stores: %v", i, err)
			}
			// raft's vote (raft.go, requestVote: setCurrentTerm, then
			// persistVote), each synced by raft-boltdb before the vote is
			// answered.
			if err := stable.SetUint64([]byte("CurrentTerm"), tr.term); err != nil {
				fail("trial %d: %v", i, err)
			}
			if err := stable.SetUint64([]byte("LastVoteTerm"), tr.term); err != nil {
				fail("trial %d: %v", i, err)
			}
			if err := stable.Set([]byte("LastVoteCand"), []byte("n2")); err != nil {
				fail("trial %d: %v", i, err)
			}
			fmt.Printf("ack %d vote %d\n", i, tr.term)
			if !tr.snapshot {
				continue
			}
			entries := make([]*raft.Log, 0, searchSnapIndex)
			for idx := uint64(1); idx <= searchSnapIndex; idx++ {
				entries = append(entries, &raft.Log{Index: idx, Term: tr.term, Type: raft.LogCommand, Data: []byte("entry")})
			}
			if err := logs.StoreLogs(entries); err != nil {
				fail("trial %d: store logs: %v", i, err)
			}
			_, trans := raft.NewInmemTransport("n1")
			conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: "n1", Address: "n1"}}}
			sink, err := snaps.Create(raft.SnapshotVersionMax, searchSnapIndex, tr.term, conf, 1, trans)
			if err != nil {
				fail("trial %d: create snapshot: %v", i, err)
			}
			if _, err := fmt.Fprintf(sink, "state-%d", i); err != nil {
				fail("trial %d: write snapshot: %v", i, err)
			}
			if err := sink.Close(); err != nil {
				fail("trial %d: close snapshot: %v", i, err)
			}
			if tr.compact {
				// raft's compactLogs once the sink closed.
				if err := logs.DeleteRange(1, searchSnapIndex); err != nil {
					fail("trial %d: compact: %v", i, err)
				}
			}
			fmt.Printf("ack %d snap %d\n", i, searchSnapIndex)
		}
		fmt.Println("ready")
		select {} // until the power goes
	case "read":
		for i, tr := range trials {
			fmt.Println(readSearchTrial(i, tr))
		}
		os.Exit(0)
	}
	os.Exit(2)
}

// restoreFSM keeps what raft restores into it.
type restoreFSM struct{ restored string }

func (f *restoreFSM) Apply(*raft.Log) any { return nil }
func (f *restoreFSM) Snapshot() (raft.FSMSnapshot, error) {
	return nil, fmt.Errorf("no snapshots here")
}
func (f *restoreFSM) Restore(rc io.ReadCloser) error {
	b, err := io.ReadAll(rc)
	rc.Close()
	f.restored = string(b)
	return err
}

// readSearchTrial opens trial i's stores after the cut and starts raft on
// them: "i term voteTerm restored lastIndex" or "i error ...".
func readSearchTrial(i int, tr searchTrial) string {
	n := &raftNode{}
	logs, stable, snaps, err := n.openStores(Config{DataDir: tr.dir})
	if err != nil {
		return fmt.Sprintf("%d error open-stores %v", i, oneLineErr(err))
	}
	defer n.closeStores()
	term, _ := stable.GetUint64([]byte("CurrentTerm"))
	vt, _ := stable.GetUint64([]byte("LastVoteTerm"))
	conf := raft.DefaultConfig()
	conf.LocalID = "n1"
	conf.Logger = hclog.NewNullLogger()
	// No election while the state is read: a single voter would elect
	// itself and append.
	conf.HeartbeatTimeout, conf.ElectionTimeout, conf.LeaderLeaseTimeout = time.Hour, time.Hour, time.Hour
	_, trans := raft.NewInmemTransport("n1")
	fsm := &restoreFSM{}
	r, err := raft.NewRaft(conf, fsm, logs, stable, snaps, trans)
	if err != nil {
		return fmt.Sprintf("%d error start %v", i, oneLineErr(err))
	}
	last := r.LastIndex()
	if err := r.Shutdown().Error(); err != nil {
		return fmt.Sprintf("%d error shutdown %v", i, oneLineErr(err))
	}
	restored := fsm.restored
	if restored == "" {
		restored = "-"
	}
	return fmt.Sprintf("%d %d %d %s %d", i, term, vt, restored, last)
}

func oneLineErr(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }

// searchReport counts what a search run did.
type searchReport struct {
	cuts, torn, trials, votes, snapshots, compacted, reopened int
	made                                                      map[string]int // "made/depth" -> trials
	bad                                                       []string
}

// runPowerSearch runs cuts rounds of trials environments each on one
// powerfs disk and returns what it found.
func runPowerSearch(t *testing.T, cuts, trials int, seed uint64) searchReport {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 41))
	disk := powerfs.MountTest(t, powerfs.Options{Seed: seed})
	rep := searchReport{made: map[string]int{}}
	for c := 0; c < cuts && len(rep.bad) == 0; c++ {
		// The first cut is whole and its first trials cover the cases
		// every planted bug needs (a snapshot behind which the log was
		// compacted, a data directory that existed, a path made on this
		// start); the rest is drawn.
		torn := c > 0 && rng.IntN(2) == 0
		var trs []searchTrial
		for i := range trials {
			tr := searchTrial{depth: 1 + rng.IntN(4), term: uint64(2 + rng.IntN(1000))}
			tr.made = rng.IntN(tr.depth + 1)
			tr.snapshot = rng.IntN(2) == 0
			tr.compact = tr.snapshot && rng.IntN(3) != 0
			tr.reopen = rng.IntN(3) == 0
			if c == 0 {
				switch i {
				case 0:
					tr.snapshot, tr.compact = true, true
				case 1:
					tr.made = tr.depth
				case 2:
					tr.made = 0
				}
			}
			parts := []string{disk.Dir(), fmt.Sprintf("c%d-t%d", c, i)}
			for d := 1; d <= tr.depth; d++ {
				parts = append(parts, fmt.Sprintf("d%d", d))
			}
			tr.dir = filepath.Join(parts...)
			if tr.made > 0 {
				// "Another process" made the first made directories below
				// the trial's root, and synced nothing.
				if err := os.MkdirAll(filepath.Join(parts[:2+tr.made]...), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			rep.made[fmt.Sprintf("%d/%d", tr.made, tr.depth)]++
			trs = append(trs, tr)
		}
		var enc []string
		for _, tr := range trs {
			enc = append(enc, tr.encode())
		}
		env := []string{envSearchTrials + "=" + strings.Join(enc, ",")}
		acked := searchWork(t, disk, env)
		if torn {
			rep.torn++
		}
		if err := disk.PowerCut(torn); err != nil {
			t.Fatal(err)
		}
		rep.cuts++
		lines := searchRead(t, disk, env)
		for i, tr := range trs {
			rep.trials++
			if tr.reopen {
				rep.reopened++
			}
			what := fmt.Sprintf("cut %d (torn %v) trial %d (path %d deep, %d made before the start, reopen %v, snapshot %v, compact %v)",
				c, torn, i, tr.depth, tr.made, tr.reopen, tr.snapshot, tr.compact)
			f := strings.Fields(lines[i])
			if len(f) < 2 || f[0] != strconv.Itoa(i) {
				rep.bad = append(rep.bad, fmt.Sprintf("%s: reader said %q", what, lines[i]))
				continue
			}
			if f[1] == "error" {
				rep.bad = append(rep.bad, fmt.Sprintf("%s: the node does not come back: %s", what, strings.Join(f[2:], " ")))
				continue
			}
			term, _ := strconv.ParseUint(f[1], 10, 64)
			vt, _ := strconv.ParseUint(f[2], 10, 64)
			restored := f[3]
			last, _ := strconv.ParseUint(f[4], 10, 64)
			if acked[i].vote > 0 {
				rep.votes++
				if term < acked[i].vote || vt < acked[i].vote {
					rep.bad = append(rep.bad, fmt.Sprintf("%s: voted in term %d, after the cut term %d, vote term %d", what, acked[i].vote, term, vt))
				}
			}
			if acked[i].snap {
				rep.snapshots++
				if tr.compact {
					rep.compacted++
				}
				if restored != fmt.Sprintf("state-%d", i) || last < searchSnapIndex {
					rep.bad = append(rep.bad, fmt.Sprintf("%s: snapshot of index %d acknowledged, after the cut raft restored %q and its last index is %d", what, searchSnapIndex, restored, last))
				}
			}
		}
	}
	return rep
}

type searchAck struct {
	vote uint64
	snap bool
}

// searchWork starts the work child and waits until it acknowledged all
// its trials; it returns the acknowledgements.
func searchWork(t *testing.T, disk *powerfs.Disk, env []string) map[int]searchAck {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), env...), envSearchChild+"=work")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	disk.Track(cmd.Process.Pid)
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	acked := map[int]searchAck{}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 1 && f[0] == "ready" {
			return acked
		}
		if len(f) != 4 || f[0] != "ack" {
			t.Fatalf("work child said %q", sc.Text())
		}
		i, _ := strconv.Atoi(f[1])
		a := acked[i]
		switch f[2] {
		case "vote":
			a.vote, _ = strconv.ParseUint(f[3], 10, 64)
		case "snap":
			a.snap = true
		}
		acked[i] = a
	}
	t.Fatalf("the work child ended before it was ready: %s", stderr.String())
	return nil
}

// searchRead runs the read child after the cut and returns its lines.
func searchRead(t *testing.T, disk *powerfs.Disk, env []string) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), env...), envSearchChild+"=read")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("read child: %v: %s", err, stderr.String())
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// TestPowerSearch: the randomized search over start environments, power
// cuts and snapshots (see above). 3 cuts of 4 nodes in CI; with
// TERMFENCE_LONG, 30 cuts of 6. TERMFENCE_POWERSEARCH_SEED replays a run's
// choices.
func TestPowerSearch(t *testing.T) {
	t.Parallel()
	cuts, trials := 3, 4
	if os.Getenv("TERMFENCE_LONG") != "" {
		cuts, trials = 30, 6
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TERMFENCE_POWERSEARCH_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("TERMFENCE_POWERSEARCH_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (TERMFENCE_POWERSEARCH_SEED replays it)", seed)
	start := time.Now()
	rep := runPowerSearch(t, cuts, trials, seed)
	t.Logf("%d cuts (%d torn), %d nodes: %d votes, %d snapshots (%d compacted behind), %d restarted before work; paths made/depth: %v; %v",
		rep.cuts, rep.torn, rep.trials, rep.votes, rep.snapshots, rep.compacted, rep.reopened, rep.made, time.Since(start).Round(time.Millisecond))
	if len(rep.bad) > 0 {
		t.Fatalf("power-loss search found:\n%s", strings.Join(rep.bad, "\n"))
	}
}
