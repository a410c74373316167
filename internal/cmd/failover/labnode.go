//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"github.com/termfence/termfence/election"
	"github.com/termfence/termfence/transport"
)

// monoNow reads CLOCK_MONOTONIC, which every process on the machine
// shares: a child's event and the parent's fault are timed on one clock.
func monoNow() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // CLOCK_MONOTONIC cannot fail on Linux
	}
	return time.Duration(ts.Nano())
}

// labEvent is one line a lab node writes on its standard output.
//
//	{"ev":"state","term":T,"leader":"ID","leading":bool}  on any change (polled every 2ms)
//	{"ev":"lead","term":T,"at":NS,"won":NS}  it holds a confirmed epoch (termfence) or is Leader (raw)
//	                                           of term T since at; won: when raft won T (termfence), else 0
//	{"ev":"resign","at":NS}                  it starts the handover it was told to make
//	{"ev":"error","msg":"..."}
//
// Times are CLOCK_MONOTONIC nanoseconds.
type labEvent struct {
	Ev      string `json:"ev"`
	Term    uint64 `json:"term,omitempty"`
	Leader  string `json:"leader,omitempty"`
	Leading bool   `json:"leading,omitempty"`
	At      int64  `json:"at,omitempty"`
	Won     int64  `json:"won,omitempty"`
	Msg     string `json:"msg,omitempty"`
}

// labNodeMain is `failover -lab-node ...`: one node of one system, run by
// the parent inside a lab host. It reads commands ("resign") from its
// standard input, reports events on its standard output, and exits when its
// standard input closes.
func labNodeMain(args []string) int {
	fs := flag.NewFlagSet("lab-node", flag.ContinueOnError)
	system := fs.String("system", "", "termfence or raw")
	id := fs.String("id", "", "server ID")
	bind := fs.String("bind", "", "raft address (this host's)")
	peers := fs.String("peers", "", "id=addr,... every voter")
	dir := fs.String("dir", "", "data directory")
	ht := fs.Duration("ht", 100*time.Millisecond, "HeartbeatTimeout")
	et := fs.Duration("et", 100*time.Millisecond, "ElectionTimeout")
	llt := fs.Duration("llt", 50*time.Millisecond, "LeaderLeaseTimeout")
	verbose := fs.Bool("v", false, "raft and election logs on stderr")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var servers []election.Server
	var conf raft.Configuration
	for _, p := range strings.Split(*peers, ",") {
		pid, addr, ok := strings.Cut(p, "=")
		if !ok {
			fmt.Fprintf(os.Stderr, "lab-node: bad -peers entry %q\n", p)
			return 2
		}
		servers = append(servers, election.Server{ID: pid, Addr: addr})
		conf.Servers = append(conf.Servers, raft.Server{ID: raft.ServerID(pid), Address: raft.ServerAddress(addr)})
	}
	logger := hclog.NewNullLogger()
	slogger := slog.New(slog.DiscardHandler)
	if *verbose {
		logger = hclog.New(&hclog.LoggerOptions{Name: *id, Level: hclog.Debug, Output: os.Stderr, TimeFormat: "15:04:05.000000"})
		slogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", *id)
	}
	out := &eventWriter{w: bufio.NewWriter(os.Stdout)}
	var n labRunner
	var err error
	switch *system {
	case "termfence":
		n, err = startTFLabNode(*id, *bind, *dir, servers, *ht, *et, *llt, slogger)
	case "raw":
		n, err = startRawLabNode(*id, *bind, *dir, conf, *ht, *et, *llt, logger)
	default:
		err = fmt.Errorf("-system %q: want termfence or raw", *system)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lab-node:", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	go n.watch(ctx, out)
	go pollState(ctx, n, out)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "resign":
			out.emit(labEvent{Ev: "resign", At: int64(monoNow())})
			go func() {
				if err := n.handover(); err != nil {
					out.emit(labEvent{Ev: "error", Msg: "handover: " + err.Error()})
				}
			}()
		}
	}
	// The parent is gone or done: no handover, as in a crash.
	cancel()
	return 0
}

type eventWriter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (e *eventWriter) emit(ev labEvent) {
	b, _ := json.Marshal(ev)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.w.Write(append(b, '\n'))
	e.w.Flush()
}

// labRunner is one node of either system.
type labRunner interface {
	state() (term uint64, leader string, leading bool)
	watch(ctx context.Context, out *eventWriter) // emits "lead" events
	handover() error
}

func pollState(ctx context.Context, n labRunner, out *eventWriter) {
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	var last labEvent
	for {
		term, leader, leading := n.state()
		cur := labEvent{Ev: "state", Term: term, Leader: leader, Leading: leading}
		if cur != last {
			out.emit(cur)
			last = cur
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

type tfLabNode struct{ el *election.Election }

func startTFLabNode(id, bind, dir string, servers []election.Server, ht, et, llt time.Duration, logger *slog.Logger) (*tfLabNode, error) {
	// transport.NewTCP as an application builds it, with the settings the
	// in-process mode gives both systems (pool 3, timeout 10 s).
	tr, err := transport.NewTCP(bind, "", transport.Config{MaxPool: 3, Timeout: 10 * time.Second, Logger: logger})
	if err != nil {
		return nil, err
	}
	el, err := election.New(election.Config{
		ID: id, Cluster: "failover", DataDir: dir, Transport: tr, Bootstrap: servers,
		HeartbeatTimeout: ht, ElectionTimeout: et, LeaderLeaseTimeout: llt, Logger: logger,
	})
	if err != nil {
		_ = tr.Close()
		return nil, err
	}
	return &tfLabNode{el: el}, nil
}

func (n *tfLabNode) state() (uint64, string, bool) {
	st := n.el.Status()
	_, err := n.el.Epoch()
	return st.Term, st.LeaderID, err == nil
}

func (n *tfLabNode) watch(ctx context.Context, out *eventWriter) {
	won := map[uint64]time.Duration{}
	for l := range n.el.Observe(ctx) {
		if l.Self && l.Epoch.IsZero() {
			if _, ok := won[l.Term]; !ok {
				won[l.Term] = monoNow()
			}
		}
		if l.Leading() {
			out.emit(labEvent{Ev: "lead", Term: l.Epoch.Term, At: int64(monoNow()), Won: int64(won[l.Epoch.Term])})
		}
	}
}

func (n *tfLabNode) handover() error { return n.el.Resign(context.Background()) }

type rawLabNode struct{ r *raft.Raft }

func startRawLabNode(id, bind, dir string, conf raft.Configuration, ht, et, llt time.Duration, logger hclog.Logger) (*rawLabNode, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// hashicorp/raft's own TCP transport, the plain way.
	trans, err := raft.NewTCPTransport(bind, nil, 3, 10*time.Second, io.Discard)
	if err != nil {
		return nil, err
	}
	store, err := raftboltdb.New(raftboltdb.Options{
		Path: filepath.Join(dir, "raft.db"), BoltOptions: &bbolt.Options{Timeout: time.Second},
	})
	if err != nil {
		_ = trans.Close()
		return nil, err
	}
	logs, err := raft.NewLogCache(512, store)
	if err != nil {
		return nil, err
	}
	snaps, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
	if err != nil {
		return nil, err
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(id)
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = ht, et, llt
	rc.Logger = logger
	exists, err := raft.HasExistingState(logs, store, snaps)
	if err == nil && !exists {
		err = raft.BootstrapCluster(rc, logs, store, snaps, trans, conf)
	}
	if err != nil {
		return nil, err
	}
	r, err := raft.NewRaft(rc, nopFSM{}, logs, store, snaps, trans)
	if err != nil {
		return nil, err
	}
	return &rawLabNode{r: r}, nil
}

func (n *rawLabNode) state() (uint64, string, bool) {
	_, id := n.r.LeaderWithID()
	return n.r.CurrentTerm(), string(id), n.r.State() == raft.Leader
}

func (n *rawLabNode) watch(ctx context.Context, out *eventWriter) {
	for {
		select {
		case <-ctx.Done():
			return
		case v := <-n.r.LeaderCh():
			if v {
				out.emit(labEvent{Ev: "lead", Term: n.r.CurrentTerm(), At: int64(monoNow())})
			}
		}
	}
}

func (n *rawLabNode) handover() error { return n.r.LeadershipTransfer().Error() }
