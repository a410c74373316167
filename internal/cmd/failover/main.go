// Command failover measures how long a three-node termfence cluster takes to
// hand out a new confirmed epoch after its leader crashes or resigns, side by
// side with raw hashicorp/raft wired the plain way, in the same run.
//
//	go run ./internal/cmd/failover [-n 50] [-ht 100ms] [-llt 50ms] [-v]
//
// Both clusters run on loopback TCP with raft-boltdb stores in a temp dir and
// the same timeouts (ElectionTimeout = HeartbeatTimeout, LeaderLeaseTimeout =
// HeartbeatTimeout/2 unless -llt is given). Rounds alternate between the two
// clusters so both see the same machine conditions.
//
// Crash: the leader's raft and transport are shut down with no handover;
// the clock runs from just before the shutdown until another node holds a
// confirmed epoch (termfence: its Observe stream reports Leading with a
// higher term) or is Leader (raw: its LeaderCh says true). The crashed node is
// then restarted on the same data dir and port, and the cluster settles
// before the next round.
//
// Graceful: termfence's Resign against raw raft's LeadershipTransfer, timed
// the same way.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/termfence/termfence/election"
	"github.com/termfence/termfence/transport"
)

type params struct {
	rounds        int
	ht, et, llt   time.Duration
	settleTimeout time.Duration
	verbose       bool
}

func main() {
	n := flag.Int("n", 50, "rounds of each kind (crash, graceful) per system")
	ht := flag.Duration("ht", 100*time.Millisecond, "HeartbeatTimeout (and ElectionTimeout)")
	llt := flag.Duration("llt", 0, "LeaderLeaseTimeout (0: HeartbeatTimeout/2)")
	verbose := flag.Bool("v", false, "log termfence's raft and election events to stderr")
	flag.Parse()
	p := params{rounds: *n, ht: *ht, et: *ht, llt: *llt, verbose: *verbose}
	if p.llt == 0 {
		p.llt = p.ht / 2
	}
	p.settleTimeout = max(100*p.ht, 10*time.Second)
	if err := run(p, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "failover:", err)
		os.Exit(1)
	}
}

// system is one three-node cluster under test.
type system interface {
	name() string
	// crash crashes the leader, returns the time until another node leads,
	// restarts the crashed node and waits for the cluster to settle.
	crash() (time.Duration, error)
	// handover makes the leader step down gracefully and returns the time
	// until another node leads.
	handover() (time.Duration, error)
	close() error
}

func run(p params, out io.Writer) error {
	dir, err := os.MkdirTemp("", "termfence-failover-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	tf, err := newTFCluster(p, filepath.Join(dir, "termfence"))
	if err != nil {
		return fmt.Errorf("termfence cluster: %w", err)
	}
	defer tf.close()
	raw, err := newRawCluster(p, filepath.Join(dir, "raw"))
	if err != nil {
		return fmt.Errorf("raw raft cluster: %w", err)
	}
	defer raw.close()
	systems := []system{tf, raw}

	fmt.Fprintf(out, "failover: 3 nodes, loopback TCP, raft-boltdb (fsync), HT=%v ET=%v LLT=%v, %d rounds each\n",
		p.ht, p.et, p.llt, p.rounds)
	crash := make([][]time.Duration, len(systems))
	grace := make([][]time.Duration, len(systems))
	for round := range p.rounds {
		for i, s := range systems {
			d, err := s.crash()
			if err != nil {
				return fmt.Errorf("%s crash round %d: %w", s.name(), round, err)
			}
			crash[i] = append(crash[i], d)
		}
	}
	for round := range p.rounds {
		for i, s := range systems {
			d, err := s.handover()
			if err != nil {
				return fmt.Errorf("%s graceful round %d: %w", s.name(), round, err)
			}
			grace[i] = append(grace[i], d)
		}
	}

	fmt.Fprintf(out, "\n%-44s %9s %9s %9s %9s\n", "time until another node leads", "p50", "p90", "p99", "max")
	report := func(what string, ds []time.Duration) stats {
		st := summarize(ds)
		fmt.Fprintf(out, "%-44s %7.1fms %7.1fms %7.1fms %7.1fms\n", what, ms(st.p50), ms(st.p90), ms(st.p99), ms(st.max))
		fmt.Fprintf(out, "%-44s %8.2fx %8.2fx %8.2fx %8.2fx\n", "  as a multiple of HT",
			st.p50.Seconds()/p.ht.Seconds(), st.p90.Seconds()/p.ht.Seconds(), st.p99.Seconds()/p.ht.Seconds(), st.max.Seconds()/p.ht.Seconds())
		return st
	}
	tc := report("crash: termfence (confirmed epoch)", crash[0])
	rc := report("crash: raw raft (LeaderCh true)", crash[1])
	tg := report("graceful: termfence Resign (confirmed epoch)", grace[0])
	rg := report("graceful: raw LeadershipTransfer (LeaderCh)", grace[1])
	fmt.Fprintf(out, "\nratio termfence/raw  crash: p50 %.3f p90 %.3f max %.3f   graceful: p50 %.3f p90 %.3f max %.3f\n",
		ratio(tc.p50, rc.p50), ratio(tc.p90, rc.p90), ratio(tc.max, rc.max),
		ratio(tg.p50, rg.p50), ratio(tg.p90, rg.p90), ratio(tg.max, rg.max))
	fmt.Fprintf(out, "mean  termfence/raw  crash: %.1fms / %.1fms   graceful: %.1fms / %.1fms\n",
		ms(mean(crash[0])), ms(mean(crash[1])), ms(mean(grace[0])), ms(mean(grace[1])))
	return nil
}

type stats struct{ p50, p90, p99, max time.Duration }

// summarize returns nearest-rank percentiles.
func summarize(ds []time.Duration) stats {
	s := slices.Clone(ds)
	slices.Sort(s)
	pct := func(q float64) time.Duration {
		i := int(math.Ceil(q*float64(len(s)))) - 1
		return s[max(i, 0)]
	}
	return stats{pct(0.50), pct(0.90), pct(0.99), s[len(s)-1]}
}

func mean(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

// freePorts reserves n loopback addresses (listen on port 0, then release),
// so nodes can be restarted on the same address.
func freePorts(n int) ([]string, error) {
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, ln.Addr().String())
		_ = ln.Close()
	}
	return addrs, nil
}

// waitUntil polls cond every millisecond until it holds or timeout passes.
func waitUntil(timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// firstOf runs watch for each index but skip and returns the time the first
// of them reported. watch must return when ctx ends.
func firstOf(ctx context.Context, n, skip int, watch func(ctx context.Context, i int) bool) (time.Time, error) {
	ctx, cancel := context.WithCancel(ctx)
	got := make(chan time.Time, n)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for i := range n {
		if i == skip {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if watch(ctx, i) {
				got <- time.Now()
			}
		}()
	}
	select {
	case t := <-got:
		return t, nil
	case <-ctx.Done():
		return time.Time{}, errors.New("no new leader in time")
	}
}

// ---- termfence ----

type tfNode struct {
	id, addr, dir string
	el            *election.Election
}

type tfCluster struct {
	p     params
	nodes []*tfNode
	boot  []election.Server
}

func newTFCluster(p params, dir string) (*tfCluster, error) {
	addrs, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	c := &tfCluster{p: p}
	for i, a := range addrs {
		nd := &tfNode{id: fmt.Sprintf("tf%d", i+1), addr: a, dir: filepath.Join(dir, fmt.Sprint(i+1))}
		c.nodes = append(c.nodes, nd)
		c.boot = append(c.boot, election.Server{ID: nd.id, Addr: a})
	}
	for _, nd := range c.nodes {
		if err := c.start(nd); err != nil {
			c.close()
			return nil, err
		}
	}
	return c, c.settle()
}

func (c *tfCluster) name() string { return "termfence" }

func (c *tfCluster) start(nd *tfNode) error {
	tr, err := transport.NewTCP(nd.addr, "", transport.Config{Logger: hclog.NewNullLogger()})
	if err != nil {
		return err
	}
	logger := hclog.NewNullLogger()
	if c.p.verbose {
		logger = hclog.New(&hclog.LoggerOptions{Name: nd.id, Level: hclog.Debug, Output: os.Stderr, TimeFormat: "15:04:05.000000"})
	}
	el, err := election.New(election.Config{
		ID: nd.id, Cluster: "failover", DataDir: nd.dir, Transport: tr, Bootstrap: c.boot,
		HeartbeatTimeout: c.p.ht, ElectionTimeout: c.p.et, LeaderLeaseTimeout: c.p.llt,
		Logger: logger,
	})
	if err != nil {
		_ = tr.Close()
		return err
	}
	nd.el = el
	return nil
}

// leader returns the index of the node holding an epoch, or -1.
func (c *tfCluster) leader() int {
	for i, nd := range c.nodes {
		if nd.el != nil {
			if _, err := nd.el.Epoch(); err == nil {
				return i
			}
		}
	}
	return -1
}

// settle waits until one node holds an epoch and every node follows it.
func (c *tfCluster) settle() error {
	return waitUntil(c.p.settleTimeout, "the termfence cluster to settle", func() bool {
		i := c.leader()
		if i < 0 {
			return false
		}
		for _, nd := range c.nodes {
			if nd.el.Status().LeaderID != c.nodes[i].id {
				return false
			}
		}
		return true
	})
}

// timeNewEpoch runs act and returns the time until a node other than the
// leader holds an epoch newer than the leader's.
func (c *tfCluster) timeNewEpoch(act func(ld *tfNode) error) (time.Duration, error) {
	if err := c.settle(); err != nil {
		return 0, err
	}
	li := c.leader()
	if li < 0 {
		return 0, errors.New("no leader")
	}
	ld := c.nodes[li]
	old, err := ld.el.Epoch()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.p.settleTimeout)
	defer cancel()
	// Subscribe before acting so no change is missed.
	updates := make([]<-chan election.Leadership, len(c.nodes))
	for i, nd := range c.nodes {
		if i != li {
			updates[i] = nd.el.Observe(ctx)
		}
	}
	t0 := time.Now()
	if c.p.verbose {
		fmt.Fprintf(os.Stderr, "%s ---- act on %s (%v)\n", t0.Format("15:04:05.000000"), ld.id, old)
	}
	if err := act(ld); err != nil {
		return 0, err
	}
	t1, err := firstOf(ctx, len(c.nodes), li, func(ctx context.Context, i int) bool {
		for {
			select {
			case <-ctx.Done():
				return false
			case l, ok := <-updates[i]:
				if !ok {
					return false
				}
				if l.Leading() && l.Epoch.Term > old.Term {
					return true
				}
			}
		}
	})
	if err != nil {
		return 0, err
	}
	return t1.Sub(t0), nil
}

func (c *tfCluster) crash() (time.Duration, error) {
	var crashed *tfNode
	d, err := c.timeNewEpoch(func(ld *tfNode) error {
		crashed = ld
		return ld.el.Raft().Shutdown().Error() // raft and transport, no handover
	})
	if crashed != nil {
		if cerr := crashed.el.Close(); cerr != nil && err == nil {
			err = cerr
		}
		crashed.el = nil
		if serr := c.start(crashed); serr != nil && err == nil {
			err = serr
		}
	}
	if err != nil {
		return 0, err
	}
	return d, c.settle()
}

func (c *tfCluster) handover() (time.Duration, error) {
	d, err := c.timeNewEpoch(func(ld *tfNode) error {
		go func() { _ = ld.el.Resign(context.Background()) }() // the clock stops on the new epoch, not on Resign's return
		return nil
	})
	if err != nil {
		return 0, err
	}
	return d, c.settle()
}

func (c *tfCluster) close() error {
	var errs []error
	for _, nd := range c.nodes {
		if nd.el != nil {
			errs = append(errs, nd.el.Close())
			nd.el = nil
		}
	}
	return errors.Join(errs...)
}

// ---- raw hashicorp/raft, wired the plain way ----

type rawNode struct {
	id, addr, dir string
	r             *raft.Raft
	store         *raftboltdb.BoltStore
}

type rawCluster struct {
	p     params
	nodes []*rawNode
	conf  raft.Configuration
}

func newRawCluster(p params, dir string) (*rawCluster, error) {
	addrs, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	c := &rawCluster{p: p}
	for i, a := range addrs {
		nd := &rawNode{id: fmt.Sprintf("raw%d", i+1), addr: a, dir: filepath.Join(dir, fmt.Sprint(i+1))}
		c.nodes = append(c.nodes, nd)
		c.conf.Servers = append(c.conf.Servers, raft.Server{ID: raft.ServerID(nd.id), Address: raft.ServerAddress(a)})
	}
	for _, nd := range c.nodes {
		if err := c.start(nd); err != nil {
			c.close()
			return nil, err
		}
	}
	return c, c.settle()
}

func (c *rawCluster) name() string { return "raw raft" }

func (c *rawCluster) start(nd *rawNode) error {
	if err := os.MkdirAll(nd.dir, 0o700); err != nil {
		return err
	}
	trans, err := raft.NewTCPTransport(nd.addr, nil, 3, 10*time.Second, io.Discard)
	if err != nil {
		return err
	}
	store, err := raftboltdb.New(raftboltdb.Options{
		Path: filepath.Join(nd.dir, "raft.db"), BoltOptions: &bbolt.Options{Timeout: time.Second},
	})
	if err != nil {
		_ = trans.Close()
		return err
	}
	logs, err := raft.NewLogCache(512, store)
	if err != nil {
		_ = trans.Close()
		_ = store.Close()
		return err
	}
	snaps, err := raft.NewFileSnapshotStore(nd.dir, 2, io.Discard)
	if err != nil {
		_ = trans.Close()
		_ = store.Close()
		return err
	}
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(nd.id)
	conf.HeartbeatTimeout, conf.ElectionTimeout, conf.LeaderLeaseTimeout = c.p.ht, c.p.et, c.p.llt
	conf.Logger = hclog.NewNullLogger()
	exists, err := raft.HasExistingState(logs, store, snaps)
	if err == nil && !exists {
		err = raft.BootstrapCluster(conf, logs, store, snaps, trans, c.conf)
	}
	if err != nil {
		_ = trans.Close()
		_ = store.Close()
		return err
	}
	r, err := raft.NewRaft(conf, nopFSM{}, logs, store, snaps, trans)
	if err != nil {
		_ = trans.Close()
		_ = store.Close()
		return err
	}
	nd.r, nd.store = r, store
	return nil
}

func (c *rawCluster) leader() int {
	for i, nd := range c.nodes {
		if nd.r != nil && nd.r.State() == raft.Leader {
			return i
		}
	}
	return -1
}

func (c *rawCluster) settle() error {
	return waitUntil(c.p.settleTimeout, "the raw cluster to settle", func() bool {
		i := c.leader()
		if i < 0 {
			return false
		}
		for _, nd := range c.nodes {
			if _, id := nd.r.LeaderWithID(); string(id) != c.nodes[i].id {
				return false
			}
		}
		return true
	})
}

// timeNewLeader runs act and returns the time until a node other than the
// leader reports Leader on its LeaderCh.
func (c *rawCluster) timeNewLeader(act func(ld *rawNode) error) (time.Duration, error) {
	if err := c.settle(); err != nil {
		return 0, err
	}
	li := c.leader()
	if li < 0 {
		return 0, errors.New("no leader")
	}
	ld := c.nodes[li]
	oldTerm := ld.r.CurrentTerm()
	for i, nd := range c.nodes { // drop stale values: LeaderCh keeps the last one
		if i != li {
			select {
			case <-nd.r.LeaderCh():
			default:
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.p.settleTimeout)
	defer cancel()
	t0 := time.Now()
	if err := act(ld); err != nil {
		return 0, err
	}
	t1, err := firstOf(ctx, len(c.nodes), li, func(ctx context.Context, i int) bool {
		r := c.nodes[i].r
		for {
			select {
			case <-ctx.Done():
				return false
			case v := <-r.LeaderCh():
				if v && r.CurrentTerm() > oldTerm {
					return true
				}
			}
		}
	})
	if err != nil {
		return 0, err
	}
	return t1.Sub(t0), nil
}

func (c *rawCluster) crash() (time.Duration, error) {
	var crashed *rawNode
	d, err := c.timeNewLeader(func(ld *rawNode) error {
		crashed = ld
		return ld.r.Shutdown().Error() // also closes the NetworkTransport
	})
	if crashed != nil {
		if cerr := crashed.store.Close(); cerr != nil && err == nil {
			err = cerr
		}
		crashed.r, crashed.store = nil, nil
		if serr := c.start(crashed); serr != nil && err == nil {
			err = serr
		}
	}
	if err != nil {
		return 0, err
	}
	return d, c.settle()
}

func (c *rawCluster) handover() (time.Duration, error) {
	d, err := c.timeNewLeader(func(ld *rawNode) error {
		go func() { _ = ld.r.LeadershipTransfer().Error() }()
		return nil
	})
	if err != nil {
		return 0, err
	}
	return d, c.settle()
}

func (c *rawCluster) close() error {
	var errs []error
	for _, nd := range c.nodes {
		if nd.r != nil {
			errs = append(errs, nd.r.Shutdown().Error(), nd.store.Close())
			nd.r = nil
		}
	}
	return errors.Join(errs...)
}

type nopFSM struct{}

func (nopFSM) Apply(*raft.Log) any                 { return nil }
func (nopFSM) Snapshot() (raft.FSMSnapshot, error) { return nopSnap{}, nil }
func (nopFSM) Restore(rc io.ReadCloser) error      { return rc.Close() }

type nopSnap struct{}

func (nopSnap) Persist(s raft.SnapshotSink) error { return s.Close() }
func (nopSnap) Release()                          {}

var (
	_ system   = (*tfCluster)(nil)
	_ system   = (*rawCluster)(nil)
	_ raft.FSM = nopFSM{}
)
