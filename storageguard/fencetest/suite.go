package fencetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// Kind describes one Fence implementation to Run.
type Kind struct {
	// Open returns a fresh, empty fence. Register its Close with
	// t.Cleanup: the suite closes some fences itself, and Close must then
	// be harmless a second time.
	Open func(t *testing.T) storageguard.Fence
	// Reopen, if set, returns a fence over the same durable state as the
	// last one Open returned (the suite closes that one first). Nil: the
	// fence is not durable, and Run skips the reopen test.
	Reopen func(t *testing.T) storageguard.Fence
	// SerialWriters: the fence runs every writer of a resource alone, even
	// under one epoch (SQLite has one writer per database). Run then skips
	// the test that same-epoch writes run together.
	SerialWriters bool
	// WaitIgnoresContext: a raise waiting for the writes of the older epoch
	// does not give up when its context ends (dirfence: flock(2) cannot be
	// interrupted). Run then skips the test that it does.
	WaitIgnoresContext bool
	// Waiting, if set, returns how many of the fence's calls wait for a
	// lock now (PostgreSQL: the sessions of the fence's database waiting
	// on a lock). The RaisesInOrder test then queues its raises in a
	// chosen order, which makes it catch a raise that reads the highest
	// epoch without an exclusive lock every time, not by chance. Nil: the
	// test runs without ordering them.
	Waiting func(t *testing.T) int
	// InProcessWaiting, if set, says that the fence holds its resources
	// with locks in this process (Memory, Cached, boltfence, dirfence) and
	// returns how many of its calls wait for resource's lock now. Run then
	// also checks, with each wait seen before the next step, that a
	// same-epoch write waiting behind a raise gives up with its context,
	// that a call nested in a write on the same resource never waits for
	// that write, and that two writers of one new epoch both run their
	// writes at once after one raise.
	InProcessWaiting func(t *testing.T, resource string) int
	// Goroutines and Ops scale the random concurrent test to the fence's
	// speed: Goroutines goroutines make Ops calls each (testing.Short:
	// a quarter). Zero: 16 and 300.
	Goroutines, Ops int
}

// Run runs, as subtests of t, the behaviour every Fence must have.
func Run(t *testing.T, k Kind) {
	// First, with a deadline: a fence whose raise waits for itself (its
	// high-water update outside its own transaction, waiting for that
	// transaction's lock: mutant Q1) fails here with a message instead
	// of hanging every later test until go test's timeout.
	if !t.Run("RaiseReturns", func(t *testing.T) { testRaiseReturns(t, k.Open(t)) }) {
		t.Fatal("a raise on an idle fence did not return: the rest of the suite would hang, not run")
	}
	t.Run("Kleppmann", func(t *testing.T) { testKleppmann(t, k.Open(t)) })
	t.Run("Refusals", func(t *testing.T) { testRefusals(t, k.Open(t)) })
	t.Run("WriteError", func(t *testing.T) { testWriteError(t, k.Open(t)) })
	t.Run("CheckDoesNotRaise", func(t *testing.T) { testCheck(t, k.Open(t)) })
	t.Run("ResourceNames", func(t *testing.T) { testResourceNames(t, k.Open(t)) })
	t.Run("Context", func(t *testing.T) { testContext(t, k.Open(t)) })
	t.Run("CancelHoldsFence", func(t *testing.T) { testCancelHolds(t, k.Open(t)) })
	if !k.WaitIgnoresContext {
		t.Run("ContextBoundsWait", func(t *testing.T) { testContextBoundsWait(t, k.Open(t)) })
	}
	t.Run("WritePanics", func(t *testing.T) { testWritePanics(t, k.Open(t)) })
	t.Run("Closed", func(t *testing.T) { testClosed(t, k.Open(t)) })
	if !k.SerialWriters {
		t.Run("SameEpochConcurrent", func(t *testing.T) { testSameEpochConcurrent(t, k.Open(t)) })
	}
	t.Run("RaiseWaitsForOlderWrites", func(t *testing.T) { testRaiseWaits(t, k.Open(t)) })
	t.Run("RaisesInOrder", func(t *testing.T) { testRaisesInOrder(t, k.Open(t), k.Waiting) })
	if k.InProcessWaiting != nil {
		runInProcess(t, k)
	}
	t.Run("ConcurrentRandomEpochs", func(t *testing.T) {
		g, n := k.Goroutines, k.Ops
		if g == 0 {
			g, n = 16, 300
		}
		if testing.Short() {
			n /= 4
		}
		ConcurrentRandom(t, g, n, k.Open(t))
	})
	if k.Reopen != nil {
		t.Run("Reopen", func(t *testing.T) { testReopen(t, k) })
	}
}

// ep is an epoch of the suite's cluster.
func ep(term uint64, leader string) epoch.Epoch {
	return epoch.Epoch{Cluster: "payments", Term: term, Leader: leader}
}

func testKleppmann(t *testing.T, f storageguard.Fence) {
	ctx := context.Background()
	e33, e34 := ep(33, "node-a"), ep(34, "node-b")
	var data []string
	if err := f.Do(ctx, "file", e33, func(context.Context) error { data = append(data, "A0"); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := f.Do(ctx, "file", e34, func(context.Context) error { data = append(data, "B"); return nil }); err != nil {
		t.Fatal(err)
	}
	err := f.Do(ctx, "file", e33, func(context.Context) error { data = append(data, "A"); return nil })
	var se *storageguard.StaleError
	if !errors.Is(err, storageguard.ErrStale) || !errors.As(err, &se) || se.Presented != e33 || se.Highest != e34 || se.Resource != "file" {
		t.Fatalf("stale write: err = %v", err)
	}
	if got := strings.Join(data, ","); got != "A0,B" {
		t.Fatalf("data = %s, want A0,B", got)
	}
	if h, err := f.Highest(ctx, "file"); err != nil || h != e34 {
		t.Fatalf("Highest = %v, %v; want %v", h, err, e34)
	}
	if err := f.Admit(ctx, "file", e33); !errors.Is(err, storageguard.ErrStale) {
		t.Fatalf("Admit(33) = %v", err)
	}
	if err := f.Check(ctx, "file", e33); !errors.Is(err, storageguard.ErrStale) {
		t.Fatalf("Check(33) = %v", err)
	}
	if err := f.Check(ctx, "file", e34); err != nil {
		t.Fatalf("Check(34) = %v", err)
	}
}

func testRefusals(t *testing.T, f storageguard.Fence) {
	ctx := context.Background()
	if err := f.Admit(ctx, "r", ep(10, "a")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		resource string
		ep       epoch.Epoch
		want     error
	}{
		{"stale", "r", ep(9, "a"), storageguard.ErrStale},
		{"conflict", "r", ep(10, "b"), storageguard.ErrConflict},
		{"foreign", "r", epoch.Epoch{Cluster: "billing", Term: 11, Leader: "a"}, storageguard.ErrForeignCluster},
		{"zero", "r", epoch.Epoch{}, epoch.ErrMalformed},
		{"malformed", "r", epoch.Epoch{Cluster: "payments", Term: 11, Leader: "a b"}, epoch.ErrMalformed},
		// A forged huge term would lock the resource for good.
		{"term above MaxTerm", "r", ep(epoch.MaxTerm+1, "mallory"), epoch.ErrMalformed},
		{"term 2^63", "r", ep(1<<63, "mallory"), epoch.ErrMalformed},
		{"term 2^64-1", "r", ep(1<<64-1, "mallory"), epoch.ErrMalformed},
		{"empty resource", "", ep(11, "a"), storageguard.ErrBadResource},
		{"long resource", strings.Repeat("r", storageguard.MaxResourceLen+1), ep(11, "a"), storageguard.ErrBadResource},
	}
	for _, c := range cases {
		called := false
		err := f.Do(ctx, c.resource, c.ep, func(context.Context) error { called = true; return nil })
		if !errors.Is(err, c.want) {
			t.Errorf("%s: Do = %v, want %v", c.name, err, c.want)
		}
		if called {
			t.Errorf("%s: write ran although refused", c.name)
		}
		if err := f.Admit(ctx, c.resource, c.ep); !errors.Is(err, c.want) {
			t.Errorf("%s: Admit = %v, want %v", c.name, err, c.want)
		}
		if err := f.Check(ctx, c.resource, c.ep); !errors.Is(err, c.want) {
			t.Errorf("%s: Check = %v, want %v", c.name, err, c.want)
		}
	}
	if h, err := f.Highest(ctx, "r"); err != nil || h != ep(10, "a") {
		t.Fatalf("refusals changed the highest: %v %v", h, err)
	}
	if _, err := f.Highest(ctx, ""); !errors.Is(err, storageguard.ErrBadResource) {
		t.Fatalf("Highest(\"\") = %v", err)
	}
	// A same-epoch write and a raise are still accepted.
	if err := f.Do(ctx, "r", ep(10, "a"), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := f.Admit(ctx, "r", ep(11, "b")); err != nil {
		t.Fatal(err)
	}
	// MaxTerm itself is a valid epoch and raises.
	if err := f.Admit(ctx, "r", ep(epoch.MaxTerm, "b")); err != nil {
		t.Fatalf("Admit(MaxTerm) = %v", err)
	}
}

func testWriteError(t *testing.T, f storageguard.Fence) {
	ctx := context.Background()
	boom := errors.New("boom")
	if err := f.Do(ctx, "r", ep(5, "a"), func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Do = %v, want write's error", err)
	}
	// The raise happened before write ran, and stays: the fence rejects, it
	// does not undo.
	if h, _ := f.Highest(ctx, "r"); h != ep(5, "a") {
		t.Fatalf("Highest = %v after a failed write under a raise", h)
	}
	if err := f.Admit(ctx, "r", ep(4, "a")); !errors.Is(err, storageguard.ErrStale) {
		t.Fatalf("Admit(4) = %v", err)
	}
}

func testCheck(t *testing.T, f storageguard.Fence) {
	ctx := context.Background()
	if err := f.Check(ctx, "r", ep(7, "a")); err != nil {
		t.Fatalf("Check on an unknown resource = %v", err)
	}
	if h, err := f.Highest(ctx, "r"); err != nil || !h.IsZero() {
		t.Fatalf("Check raised: %v %v", h, err)
	}
	if err := f.Admit(ctx, "r", ep(7, "a")); err != nil {
		t.Fatal(err)
	}
	if err := f.Check(ctx, "r", ep(9, "a")); err != nil {
		t.Fatalf("Check(newer) = %v", err)
	}
	if h, _ := f.Highest(ctx, "r"); h != ep(7, "a") {
		t.Fatalf("Check raised to %v", h)
	}
	if err := f.Admit(ctx, "r", ep(6, "a")); !errors.Is(err, storageguard.ErrStale) {
		t.Fatalf("Admit(6) = %v", err)
	}
}

func testResourceNames(t *testing.T, f storageguard.Fence) {
	ctx := context.Background()
	names := []string{
		"a", "A", "../escape", "/abs/path", ".", "..", "a/b", "a\x00b", "\xff\xfe", "with space",
		"ünïcødé", strings.Repeat("z", storageguard.MaxResourceLen), "CON", "x.tmp",
	}
	for i, n := range names {
		if err := f.Admit(ctx, n, ep(uint64(100+i), "a")); err != nil {
			t.Fatalf("Admit(%q) = %v", n, err)
		}
	}
	for i, n := range names {
		h, err := f.Highest(ctx, n)
		if err != nil || h != ep(uint64(100+i), "a") {
			t.Fatalf("Highest(%q) = %v, %v: resources are not independent", n, h, err)
		}
	}
	if h, _ := f.Highest(ctx, "never"); !h.IsZero() {
		t.Fatalf("unknown resource has highest %v", h)
	}
}

func testContext(t *testing.T, f storageguard.Fence) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	err := f.Do(ctx, "r", ep(3, "a"), func(context.Context) error { called = true; return nil })
	if !errors.Is(err, context.Canceled) || called {
		t.Fatalf("Do with a cancelled context = %v (write ran: %v)", err, called)
	}
	// The write sees the caller's context.
	type key struct{}
	ctx = context.WithValue(context.Background(), key{}, "v")
	err = f.Do(ctx, "r", ep(3, "a"), func(wctx context.Context) error {
		if wctx.Value(key{}) != "v" {
			return errors.New("write did not get the caller's context")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func testWritePanics(t *testing.T, f storageguard.Fence) {
	ctx := context.Background()
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic was swallowed")
			}
		}()
		_ = f.Do(ctx, "r", ep(3, "a"), func(context.Context) error { panic("write panicked") })
	}()
	// The lock was released: a raise and a same-epoch write still go through.
	done := make(chan error, 1)
	go func() { done <- f.Admit(ctx, "r", ep(4, "a")) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("raise blocked after a panicking write: lock leaked")
	}
}

func testClosed(t *testing.T, f storageguard.Fence) {
	ctx := context.Background()
	if err := f.Admit(ctx, "r", ep(1, "a")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Do(ctx, "r", ep(1, "a"), func(context.Context) error { return nil }); !errors.Is(err, storageguard.ErrClosed) {
		t.Fatalf("Do after Close = %v", err)
	}
	if err := f.Admit(ctx, "r", ep(2, "a")); !errors.Is(err, storageguard.ErrClosed) {
		t.Fatalf("Admit after Close = %v", err)
	}
	if err := f.Check(ctx, "r", ep(2, "a")); !errors.Is(err, storageguard.ErrClosed) {
		t.Fatalf("Check after Close = %v", err)
	}
	if _, err := f.Highest(ctx, "r"); !errors.Is(err, storageguard.ErrClosed) {
		t.Fatalf("Highest after Close = %v", err)
	}
	_ = f.Close() // a second Close must not panic
}

// testSameEpochConcurrent proves that two writes under one epoch are inside
// write at the same time: each waits for the other to enter.
func testSameEpochConcurrent(t *testing.T, f storageguard.Fence) {
	ctx := context.Background()
	e := ep(8, "a")
	if err := f.Admit(ctx, "r", e); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	entered := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	errs := make(chan error, 2)
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- f.Do(ctx, "r", e, func(context.Context) error {
				close(entered[i])
				select {
				case <-entered[1-i]:
					return nil
				case <-time.After(10 * time.Second):
					return errors.New("same-epoch writes were serialized")
				}
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// testRaiseWaits: a raise must wait for a write in flight under the older
// epoch, and the older epoch is refused afterwards.
func testRaiseWaits(t *testing.T, f storageguard.Fence) {
	ctx := context.Background()
	e33, e34 := ep(33, "a"), ep(34, "b")
	if err := f.Admit(ctx, "r", e33); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var raised atomic.Bool
	writeDone := make(chan error, 1)
	go func() {
		writeDone <- f.Do(ctx, "r", e33, func(context.Context) error {
			close(entered)
			<-release
			if raised.Load() {
				return errors.New("epoch 34 was admitted while a write under 33 was running")
			}
			return nil
		})
	}()
	<-entered
	raiseDone := make(chan error, 1)
	go func() {
		err := f.Admit(ctx, "r", e34)
		raised.Store(true)
		raiseDone <- err
	}()
	// The injected fault: the old leader's write stalls. A fence that did
	// not wait would complete the raise within this window.
	select {
	case err := <-raiseDone:
		close(release)
		<-writeDone
		t.Fatalf("raise returned (%v) while a write under the older epoch was in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-writeDone; err != nil {
		t.Fatal(err)
	}
	if err := <-raiseDone; err != nil {
		t.Fatal(err)
	}
	if err := f.Do(ctx, "r", e33, func(context.Context) error { return nil }); !errors.Is(err, storageguard.ErrStale) {
		t.Fatalf("33 after the raise: %v", err)
	}
}

// ConcurrentRandom runs goroutines goroutines of ops calls each, presenting
// random epochs (mostly near each resource's newest) on three resources,
// and checks docs/DESIGN.md I4 on the writes that were accepted
// (CheckSpans), that Highest names the newest accepted term, and that both
// acceptances and refusals happened. With several fences (handles on one
// durable state) the goroutines take turns using them; the first one is
// asked for Highest.
func ConcurrentRandom(t *testing.T, goroutines, ops int, fences ...storageguard.Fence) {
	t.Helper()
	if len(fences) == 0 {
		t.Fatal("fencetest.ConcurrentRandom: no fence")
	}
	ctx := context.Background()
	resources := []string{"r0", "r1", "r2"}
	var clock atomic.Int64
	var tops [3]atomic.Uint64
	var mu sync.Mutex
	spans := make([][]Span, len(resources))
	var wg sync.WaitGroup
	var accepted, stale atomic.Int64
	errc := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := fences[g%len(fences)]
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for i := 0; i < ops; i++ {
				ri := rng.IntN(len(resources))
				top := tops[ri].Load()
				if rng.IntN(10) == 0 {
					tops[ri].CompareAndSwap(top, top+1)
					top++
				}
				term := top + 1
				if d := uint64(rng.IntN(3)); d < term {
					term -= d
				}
				e := ep(term, fmt.Sprintf("n%d", term%3))
				err := f.Do(ctx, resources[ri], e, func(context.Context) error {
					s := Span{Term: term, Start: clock.Add(1)}
					for k := 0; k < rng.IntN(4); k++ {
						runtime.Gosched()
					}
					s.End = clock.Add(1)
					mu.Lock()
					spans[ri] = append(spans[ri], s)
					mu.Unlock()
					return nil
				})
				switch {
				case err == nil:
					accepted.Add(1)
				case errors.Is(err, storageguard.ErrStale):
					stale.Add(1)
				default:
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	for ri, r := range resources {
		if err := CheckSpans(spans[ri]); err != nil {
			t.Errorf("%s: %v", r, err)
		}
		top := maxTerm(spans[ri])
		if h, err := fences[0].Highest(ctx, r); err != nil || h.Term != top {
			t.Errorf("%s: Highest = %v, %v; want term %d", r, h, err, top)
		}
	}
	t.Logf("%d accepted, %d stale", accepted.Load(), stale.Load())
	if accepted.Load() == 0 || stale.Load() == 0 {
		t.Fatalf("test did not exercise both paths: %d accepted, %d stale", accepted.Load(), stale.Load())
	}
}

func testReopen(t *testing.T, k Kind) {
	ctx := context.Background()
	f := k.Open(t)
	for i := 0; i < 20; i++ {
		if err := f.Admit(ctx, fmt.Sprintf("res-%d", i), ep(uint64(10+i), "a")); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Admit(ctx, "res-0", ep(50, "b")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	g := k.Reopen(t)
	for i := 0; i < 20; i++ {
		want := ep(uint64(10+i), "a")
		if i == 0 {
			want = ep(50, "b")
		}
		h, err := g.Highest(ctx, fmt.Sprintf("res-%d", i))
		if err != nil || h != want {
			t.Fatalf("after reopen res-%d: Highest = %v, %v; want %v", i, h, err, want)
		}
	}
	if err := g.Admit(ctx, "res-0", ep(49, "a")); !errors.Is(err, storageguard.ErrStale) {
		t.Fatalf("after reopen an older epoch was admitted: %v", err)
	}
}

// TwoHandles checks two fences over one durable state (as two processes
// would hold it): each sees the other's raises, refuses what the other made
// stale, and the random concurrent test holds across both.
func TwoHandles(t *testing.T, a, b storageguard.Fence) {
	t.Helper()
	ctx := context.Background()
	if err := a.Admit(ctx, "x", ep(33, "node-a")); err != nil {
		t.Fatal(err)
	}
	if err := b.Admit(ctx, "x", ep(34, "node-b")); err != nil {
		t.Fatal(err)
	}
	if err := a.Do(ctx, "x", ep(33, "node-a"), func(context.Context) error { return nil }); !errors.Is(err, storageguard.ErrStale) {
		t.Fatalf("handle a admitted 33 after handle b raised to 34: %v", err)
	}
	if h, _ := a.Highest(ctx, "x"); h != ep(34, "node-b") {
		t.Fatalf("handle a sees %v", h)
	}
	ConcurrentRandom(t, 16, 200, a, b)
}
