package transport

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// frameCorpus is where FuzzFrameParsers' seed corpus lives; go test runs
// every file in it as a seed.
var frameCorpus = filepath.Join("testdata", "fuzz", "FuzzFrameParsers")

// TestRecordFrames records the bytes real raft nodes send each other —
// hashicorp/raft v1.7.2's NetworkTransport over loopback TCP, through
// elections with pre-votes, appends, a snapshot installed on two joining
// nodes and a leadership transfer — and writes each connection's stream
// into FuzzFrameParsers' seed corpus. Run with TERMFENCE_RECORD_FRAMES=1
// after a raft upgrade; otherwise it skips.
func TestRecordFrames(t *testing.T) {
	if os.Getenv("TERMFENCE_RECORD_FRAMES") == "" {
		t.Skip("TERMFENCE_RECORD_FRAMES is not set: the recorded corpus in testdata is used as it is")
	}
	rec := &recorder{}
	var nodes []*node
	for i := range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream: &recordingLayer{Listener: ln, rec: rec}, MaxPool: 3, Timeout: 2 * time.Second, Logger: quietHCLog(),
		})
		nodes = append(nodes, &node{id: raft.ServerID(fmt.Sprintf("n%d", i)), addr: tr.LocalAddr(), trans: tr})
	}
	for i, n := range nodes {
		c := testConfig(n.id, fast)
		c.TrailingLogs, c.SnapshotThreshold = 2, 1<<20
		store := raft.NewInmemStore()
		snaps := raft.NewInmemSnapshotStore()
		if i == 0 {
			conf := raft.Configuration{Servers: []raft.Server{{ID: n.id, Address: n.addr, Suffrage: raft.Voter}}}
			if err := raft.BootstrapCluster(c, store, store, snaps, n.trans, conf); err != nil {
				t.Fatal(err)
			}
		}
		r, err := raft.NewRaft(c, &bytesFSM{}, store, store, snaps, n.trans)
		if err != nil {
			t.Fatal(err)
		}
		n.r = r
	}
	defer func() {
		for _, n := range nodes {
			_ = n.r.Shutdown().Error()
			_ = n.trans.Close()
		}
		// raft's NetworkTransport keeps its pooled connections, and the
		// goroutines serving them, past Close.
		rec.mu.Lock()
		for _, c := range rec.conns {
			_ = c.Close()
		}
		rec.mu.Unlock()
	}()
	waitFor(t, 10*time.Second, "n0 leads", func() bool { return nodes[0].r.State() == raft.Leader })
	for i := range 20 {
		if err := nodes[0].r.Apply(bytes.Repeat([]byte{byte(i)}, 10+i*30), 5*time.Second).Error(); err != nil {
			t.Fatal(err)
		}
	}
	if err := nodes[0].r.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes[1:] {
		if err := nodes[0].r.AddVoter(n.id, n.addr, 0, 5*time.Second).Error(); err != nil {
			t.Fatal(err)
		}
	}
	applyOnLeader(t, nodes, []byte("after the join"))
	ld, _ := waitLeader(t, nodes)
	if err := ld.r.LeadershipTransfer().Error(); err != nil {
		t.Fatal(err)
	}
	waitLeader(t, nodes, ld)
	applyOnLeader(t, nodes, []byte("after the transfer"))
	// The leader stops: the others pre-vote, then vote.
	ld, _ = waitLeader(t, nodes)
	if err := ld.r.Shutdown().Error(); err != nil {
		t.Fatal(err)
	}
	waitLeader(t, nodes, ld)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if err := os.MkdirAll(frameCorpus, 0o755); err != nil {
		t.Fatal(err)
	}
	old, _ := filepath.Glob(filepath.Join(frameCorpus, "recorded-*"))
	for _, p := range old {
		_ = os.Remove(p)
	}
	for i, b := range rec.streams {
		b := b.Bytes()
		if len(b) == 0 {
			continue
		}
		b = b[:min(len(b), 64<<10)]
		body := "go test fuzz v1\n[]byte(" + strconv.Quote(string(b)) + ")\n"
		if err := os.WriteFile(filepath.Join(frameCorpus, fmt.Sprintf("recorded-%02d", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("recorded %d connections", len(rec.streams))
}

// bytesFSM keeps the last command; its snapshot is that command.
type bytesFSM struct {
	mu   sync.Mutex
	last []byte
}

func (f *bytesFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last = append([]byte(nil), l.Data...)
	return nil
}

func (f *bytesFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return bytesSnapshot(append([]byte("snapshot of "), f.last...)), nil
}

func (f *bytesFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	f.mu.Lock()
	f.last = b
	f.mu.Unlock()
	return err
}

type bytesSnapshot []byte

func (s bytesSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (bytesSnapshot) Release() {}

// recorder keeps every byte each dialed connection wrote.
type recorder struct {
	mu      sync.Mutex
	streams []*bytes.Buffer
	conns   []net.Conn
}

type recordingLayer struct {
	net.Listener
	rec *recorder
}

func (l *recordingLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", string(addr), timeout)
	if err != nil {
		return nil, err
	}
	l.rec.mu.Lock()
	defer l.rec.mu.Unlock()
	b := &bytes.Buffer{}
	l.rec.streams = append(l.rec.streams, b)
	l.rec.conns = append(l.rec.conns, c)
	return &recordingConn{Conn: c, rec: l.rec, buf: b}, nil
}

type recordingConn struct {
	net.Conn
	rec *recorder
	buf *bytes.Buffer
}

func (c *recordingConn) Write(b []byte) (int, error) {
	c.rec.mu.Lock()
	c.buf.Write(b)
	c.rec.mu.Unlock()
	return c.Conn.Write(b)
}

// corpusSeeds reads the seed corpus files of FuzzFrameParsers.
func corpusSeeds(tb testing.TB) [][]byte {
	files, _ := filepath.Glob(filepath.Join(frameCorpus, "*"))
	var seeds [][]byte
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		s := strings.TrimSpace(strings.TrimPrefix(string(b), "go test fuzz v1\n"))
		if !strings.HasPrefix(s, "[]byte(") || !strings.HasSuffix(s, ")") {
			tb.Fatalf("%s: not a []byte corpus entry", p)
		}
		v, err := strconv.Unquote(s[len("[]byte(") : len(s)-1])
		if err != nil {
			tb.Fatalf("%s: %v", p, err)
		}
		seeds = append(seeds, []byte(v))
	}
	return seeds
}
