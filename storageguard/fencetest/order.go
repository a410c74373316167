package fencetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// testRaisesInOrder: two raises queued behind a write in flight, the newer
// first, are decided on what each finds once it holds the fence, never on
// what it read before it waited. A write under 34 holds the fence; a raise
// to 36 queues, then a raise to 35; the write ends. The raise to 36 must
// succeed and the one to 35 be refused: a fence that read 34 before taking
// its exclusive lock (pgfence without FOR UPDATE: mutant P1) lets 35
// overwrite 36, lowering the fence. With waiting (Kind.Waiting) each raise
// is seen queued before the next starts, so such a fence fails every time;
// without it the order is left to the scheduler.
func testRaisesInOrder(t *testing.T, f storageguard.Fence, waiting func(t *testing.T) int) {
	ctx := context.Background()
	e34, e35, e36 := ep(34, "a"), ep(35, "b"), ep(36, "c")
	if err := f.Admit(ctx, "r", e34); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	writeDone := make(chan error, 1)
	go func() {
		writeDone <- f.Do(ctx, "r", e34, func(context.Context) error {
			close(entered)
			<-release
			return nil
		})
	}()
	<-entered
	released := false
	defer func() {
		if !released {
			close(release)
			<-writeDone
		}
	}()
	base := 0
	if waiting != nil {
		base = waiting(t)
	}
	queued := func(n int, what string) {
		if waiting == nil {
			return
		}
		// An event, polled: the fence reports the raise waiting. The bound
		// only turns a raise that never waits into a clear failure.
		deadline := time.Now().Add(30 * time.Second)
		for waiting(t) < base+n {
			if time.Now().After(deadline) {
				t.Fatalf("%s never waited for the write in flight under 34", what)
			}
			time.Sleep(time.Millisecond) // poll interval
		}
	}
	raise := func(e epoch.Epoch) chan error {
		ch := make(chan error, 1)
		go func() { ch <- f.Admit(ctx, "r", e) }()
		return ch
	}
	r36 := raise(e36)
	queued(1, "the raise to 36")
	r35 := raise(e35)
	queued(2, "the raise to 35")
	close(release)
	released = true
	if err := <-writeDone; err != nil {
		t.Fatalf("write under 34: %v", err)
	}
	err36, err35 := <-r36, <-r35
	h, herr := f.Highest(ctx, "r")
	if herr != nil {
		t.Fatal(herr)
	}
	if err36 != nil {
		t.Errorf("raise to 36 (queued first): %v", err36)
	}
	// Unordered (no waiting), the raise to 35 may have gone first.
	if (waiting != nil || err35 != nil) && !errors.Is(err35, storageguard.ErrStale) {
		t.Errorf("raise to 35, queued behind the raise to 36: %v, want ErrStale (it was decided on the 34 it read before it waited)", err35)
	}
	if h.Term != 36 {
		t.Errorf("Highest = %v after raises to 36 and then 35: the fence went down", h)
	}
}

// raiseBound bounds testRaiseReturns' raises: seconds on the slowest
// fence, and far above them on a loaded machine.
const raiseBound = 15 * time.Second

// testRaiseReturns: on an idle fence a first epoch, a raise and a
// same-epoch write each return within raiseBound, with no error.
func testRaiseReturns(t *testing.T, f storageguard.Fence) {
	for _, step := range []struct {
		what string
		e    epoch.Epoch
	}{{"the first epoch", ep(7, "a")}, {"a raise", ep(8, "b")}, {"a write under the current epoch", ep(8, "b")}} {
		ctx, cancel := context.WithTimeout(context.Background(), raiseBound)
		start := time.Now()
		err := f.Do(ctx, "r", step.e, func(context.Context) error { return nil })
		cancel()
		if err != nil {
			t.Fatalf("%s (%v) on an idle fence: %v after %v; a fence that waits for itself (a high-water update outside its own transaction, say) ends like this", step.what, step.e, err, time.Since(start).Round(time.Millisecond))
		}
	}
	if h, err := f.Highest(context.Background(), "r"); err != nil || h != ep(8, "b") {
		t.Fatalf("Highest = %v, %v; want %v", h, err, ep(8, "b"))
	}
}
