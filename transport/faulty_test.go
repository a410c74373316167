package transport

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// inmemFaulty returns n connected in-memory transports, each wrapped in a
// Faulty, plus the Inmem values underneath.
func inmemFaulty(t *testing.T, n int) ([]*Faulty, []*Inmem) {
	t.Helper()
	fs := make([]*Faulty, n)
	ms := make([]*Inmem, n)
	for i := range ms {
		ms[i] = NewInmem(fmt.Sprintf("m%d", i))
		for _, p := range ms[:i] {
			ms[i].Connect(p)
		}
		fs[i] = NewFaulty(ms[i])
	}
	t.Cleanup(func() {
		for _, f := range fs {
			_ = f.Close()
		}
	})
	return fs, ms
}

// responder answers every AppendEntries arriving on c with success and counts
// them, until stop is closed.
type responder struct {
	mu  sync.Mutex
	got int
	wg  sync.WaitGroup
}

func respond(c <-chan raft.RPC, stop <-chan struct{}) *responder {
	r := &responder{}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			select {
			case rpc := <-c:
				r.mu.Lock()
				r.got++
				r.mu.Unlock()
				rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
			case <-stop:
				return
			}
		}
	}()
	return r
}

func (r *responder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got
}

func send(from raft.Transport, to raft.ServerAddress) error {
	var resp raft.AppendEntriesResponse
	return from.AppendEntries("x", to, heartbeat(from.LocalAddr(), 1), &resp)
}

func TestFaultyCutBothDirections(t *testing.T) {
	fs, _ := inmemFaulty(t, 3)
	a, b, c := fs[0], fs[1], fs[2]
	stop := make(chan struct{})
	ra, rb, rc := respond(a.Consumer(), stop), respond(b.Consumer(), stop), respond(c.Consumer(), stop)
	defer func() { close(stop); ra.wg.Wait(); rb.wg.Wait(); rc.wg.Wait() }()

	a.Cut(b.LocalAddr())
	// Outbound from a to b: fails fast, b sees nothing.
	if err := send(a, b.LocalAddr()); !errors.Is(err, ErrPartitioned) {
		t.Fatalf("a->b after cut: %v, want ErrPartitioned", err)
	}
	// Inbound to a from b: b is not faulty itself, a refuses it.
	if err := send(b, a.LocalAddr()); !errors.Is(err, ErrPartitioned) {
		t.Fatalf("b->a after cut: %v, want ErrPartitioned", err)
	}
	if ra.count() != 0 || rb.count() != 0 {
		t.Fatalf("delivered across the cut: a got %d, b got %d", ra.count(), rb.count())
	}
	// Other peers are unaffected.
	if err := send(a, c.LocalAddr()); err != nil {
		t.Fatalf("a->c: %v", err)
	}
	if err := send(c, a.LocalAddr()); err != nil {
		t.Fatalf("c->a: %v", err)
	}
	if ra.count() != 1 || rc.count() != 1 {
		t.Fatalf("a got %d, c got %d; want 1 each", ra.count(), rc.count())
	}

	a.Heal()
	if err := send(a, b.LocalAddr()); err != nil {
		t.Fatalf("a->b after heal: %v", err)
	}
	if err := send(b, a.LocalAddr()); err != nil {
		t.Fatalf("b->a after heal: %v", err)
	}
	if ra.count() != 2 || rb.count() != 1 {
		t.Fatalf("after heal a got %d, b got %d; want 2, 1", ra.count(), rb.count())
	}
}

func TestFaultyIsolate(t *testing.T) {
	fs, _ := inmemFaulty(t, 3)
	a, b, c := fs[0], fs[1], fs[2]
	stop := make(chan struct{})
	ra, rb, rc := respond(a.Consumer(), stop), respond(b.Consumer(), stop), respond(c.Consumer(), stop)
	defer func() { close(stop); ra.wg.Wait(); rb.wg.Wait(); rc.wg.Wait() }()

	a.Isolate()
	for _, p := range []*Faulty{b, c} {
		if err := send(a, p.LocalAddr()); !errors.Is(err, ErrPartitioned) {
			t.Fatalf("a->%s isolated: %v, want ErrPartitioned", p.LocalAddr(), err)
		}
		if err := send(p, a.LocalAddr()); !errors.Is(err, ErrPartitioned) {
			t.Fatalf("%s->a isolated: %v, want ErrPartitioned", p.LocalAddr(), err)
		}
	}
	var vresp raft.RequestVoteResponse
	if err := a.RequestVote("b", b.LocalAddr(), &raft.RequestVoteRequest{Term: 1}, &vresp); !errors.Is(err, ErrPartitioned) {
		t.Fatalf("vote from isolated node: %v, want ErrPartitioned", err)
	}
	if err := send(b, c.LocalAddr()); err != nil {
		t.Fatalf("b->c while a isolated: %v", err)
	}
	if ra.count() != 0 || rb.count() != 0 || rc.count() != 1 {
		t.Fatalf("counts a=%d b=%d c=%d, want 0 0 1", ra.count(), rb.count(), rc.count())
	}
	a.Heal()
	if err := send(b, a.LocalAddr()); err != nil {
		t.Fatalf("b->a after heal: %v", err)
	}
	if ra.count() != 1 {
		t.Fatalf("a got %d after heal, want 1", ra.count())
	}
}

// TestFaultyIsolateRefusesUnknownSender: an inbound RPC that names no
// sender (no RPCHeader.Addr) cannot be matched against a Cut, but Isolate
// still refuses it: isolation means nothing gets in.
func TestFaultyIsolateRefusesUnknownSender(t *testing.T) {
	fs, ms := inmemFaulty(t, 2)
	a := fs[0]
	stop := make(chan struct{})
	ra := respond(a.Consumer(), stop)
	defer func() { close(stop); ra.wg.Wait() }()
	anonymous := func() error { // from b's Inmem, bypassing b's Faulty
		var resp raft.AppendEntriesResponse
		return ms[1].AppendEntries("a", a.LocalAddr(), &raft.AppendEntriesRequest{Term: 1}, &resp)
	}
	if err := anonymous(); err != nil {
		t.Fatalf("anonymous RPC before Isolate: %v", err)
	}
	a.Isolate()
	if err := anonymous(); !errors.Is(err, ErrPartitioned) {
		t.Fatalf("anonymous RPC to an isolated node: %v, want ErrPartitioned", err)
	}
	if ra.count() != 1 {
		t.Fatalf("isolated node received %d RPCs, want only the one before Isolate", ra.count())
	}
}

func TestFaultyPipelineNotSupported(t *testing.T) {
	fs, _ := inmemFaulty(t, 2)
	if _, err := fs[0].AppendEntriesPipeline("x", fs[1].LocalAddr()); !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		t.Fatalf("pipeline: %v, want raft.ErrPipelineReplicationNotSupported", err)
	}
}

func TestFaultyClosedAndConcurrentFaults(t *testing.T) {
	fs, _ := inmemFaulty(t, 2)
	a, b := fs[0], fs[1]
	stop := make(chan struct{})
	rb := respond(b.Consumer(), stop)
	defer func() { close(stop); rb.wg.Wait() }()
	// Flip faults from one goroutine while RPCs run on others (-race).
	var wg, flipper sync.WaitGroup
	done := make(chan struct{})
	flipper.Add(1)
	go func() {
		defer flipper.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			switch i % 5 {
			case 0:
				a.Isolate()
			case 1:
				a.Cut(b.LocalAddr())
			case 2:
				a.Delay(time.Microsecond)
			case 3:
				a.Drop(0.5, int64(i))
			case 4:
				a.Heal()
				a.Delay(0)
				a.Drop(0, 0)
			}
		}
	}()
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				err := send(a, b.LocalAddr())
				if err != nil && !errors.Is(err, ErrPartitioned) && !errors.Is(err, ErrDropped) {
					t.Errorf("unexpected error: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	flipper.Wait()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := send(a, b.LocalAddr()); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v, want ErrClosed", err)
	}
}

// TestFaultyIsolateLeaderRaft partitions the leader of a live three-node
// cluster: the others elect a new leader in a higher term, the old leader
// steps down, and after Heal the cluster has one leader again.
func TestFaultyIsolateLeaderRaft(t *testing.T) {
	t.Run("inmem", func(t *testing.T) {
		fs, _ := inmemFaulty(t, 3)
		isolateLeader(t, startCluster(t, fast, fs[0], fs[1], fs[2]))
	})
	t.Run("tcp", func(t *testing.T) {
		isolateLeader(t, startCluster(t, fast,
			NewFaulty(newTestTCP(t, Config{})),
			NewFaulty(newTestTCP(t, Config{})),
			NewFaulty(newTestTCP(t, Config{}))))
	})
}

func isolateLeader(t *testing.T, nodes []*node) {
	leader, term := waitLeader(t, nodes)
	lf := leader.trans.(*Faulty)

	lf.Isolate()
	newLeader, newTerm := waitLeader(t, nodes, leader)
	if newTerm <= term {
		t.Fatalf("new leader %s in term %d, old term %d", newLeader.id, newTerm, term)
	}
	waitFor(t, 5*time.Second, "the isolated leader to step down", func() bool {
		return leader.r.State() != raft.Leader
	})
	if err := newLeader.r.Apply([]byte("x"), 5*time.Second).Error(); err != nil {
		t.Fatalf("apply on new leader: %v", err)
	}
	lf.Heal()
	_, healedTerm := waitLeader(t, nodes)
	if healedTerm < newTerm {
		t.Fatalf("term went back from %d to %d", newTerm, healedTerm)
	}
	waitFor(t, 5*time.Second, "the old leader to catch up", func() bool {
		return leader.r.LastIndex() >= newLeader.r.LastIndex()
	})
}

// TestFaultyCutFollowerRaft cuts the leader off from one follower: the leader
// keeps its term with the other follower's votes, the cut follower receives
// no entries, and after Heal it catches up.
func TestFaultyCutFollowerRaft(t *testing.T) {
	fs, _ := inmemFaulty(t, 3)
	nodes := startCluster(t, stable, fs[0], fs[1], fs[2])
	leader, term := waitLeader(t, nodes)
	if err := leader.r.Barrier(5 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	var cut, other *node
	for _, n := range nodes {
		if n != leader {
			if cut == nil {
				cut = n
			} else {
				other = n
			}
		}
	}
	waitFor(t, 5*time.Second, "followers to catch up", func() bool {
		return cut.r.LastIndex() == leader.r.LastIndex() && other.r.LastIndex() == leader.r.LastIndex()
	})
	before := cut.r.LastIndex()
	leader.trans.(*Faulty).Cut(cut.addr)
	for i := 0; i < 5; i++ {
		if err := leader.r.Apply([]byte("x"), 5*time.Second).Error(); err != nil {
			t.Fatalf("apply %d: %v", i, err)
		}
	}
	if got := leader.r.CurrentTerm(); got != term || leader.r.State() != raft.Leader {
		t.Fatalf("leader lost its term: state %v term %d, want Leader %d", leader.r.State(), got, term)
	}
	if got := cut.r.LastIndex(); got != before {
		t.Fatalf("cut follower's log moved from %d to %d", before, got)
	}
	leader.trans.(*Faulty).Heal()
	waitFor(t, 5*time.Second, "the cut follower to catch up", func() bool {
		return cut.r.LastIndex() >= leader.r.LastIndex()
	})
}
