package fencetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// inProcessBound turns a wait that never ends (the bug these tests look
// for) into a failure. A correct fence passes however loaded the machine:
// every wait below ends on an event, never on this bound.
const inProcessBound = 20 * time.Second

// runInProcess runs the tests of fences that hold their resources with
// in-process locks (Kind.InProcessWaiting).
func runInProcess(t *testing.T, k Kind) {
	t.Run("ContextBoundsSameEpochWait", func(t *testing.T) { testContextBoundsSameEpochWait(t, k.Open(t), k.InProcessWaiting) })
	t.Run("NestedNeverWaitsForItself", func(t *testing.T) { testNested(t, k.Open(t), k.InProcessWaiting) })
	t.Run("SameEpochRaisersRunTogether", func(t *testing.T) { testSameEpochRaisers(t, k.Open(t), k.InProcessWaiting) })
}

// waitFor polls cond, the fence's report of its waiting calls, until it
// holds; the bound only turns a call that never waits into a failure.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := awaitCond(what, cond); err != nil {
		t.Fatal(err)
	}
}

// awaitCond is waitFor for goroutines other than the test's.
func awaitCond(what string, cond func() bool) error {
	deadline := time.Now().Add(inProcessBound)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New(what + " never happened")
		}
		time.Sleep(time.Millisecond) // poll interval
	}
	return nil
}

// holdWrite starts a write under e on "r" that runs until the returned
// release is called, and waits until it runs. release returns the Do's
// error.
func holdWrite(t *testing.T, f storageguard.Fence, e epoch.Epoch) (release func() error) {
	t.Helper()
	entered, rel := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- f.Do(context.Background(), "r", e, func(context.Context) error {
			close(entered)
			<-rel
			return nil
		})
	}()
	select {
	case <-entered:
	case err := <-done:
		t.Fatalf("write under %v: %v", e, err)
	}
	released := false
	t.Cleanup(func() {
		if !released {
			close(rel)
			<-done
		}
	})
	return func() error {
		released = true
		close(rel)
		return <-done
	}
}

// testContextBoundsSameEpochWait: a write under the current epoch that
// waits behind a queued raise (which waits for a write in flight) gives up
// when its context ends, and leaves nothing behind: the raise goes through
// once the write in flight ends. A fence that waits for its read lock
// without the context returns only when the raise is done.
func testContextBoundsSameEpochWait(t *testing.T, f storageguard.Fence, waiting func(t *testing.T, resource string) int) {
	bg := context.Background()
	older, newer := ep(33, "a"), ep(34, "b")
	if err := f.Admit(bg, "r", older); err != nil {
		t.Fatal(err)
	}
	release := holdWrite(t, f, older)
	base := waiting(t, "r")
	raised := make(chan error, 1)
	go func() { raised <- f.Admit(bg, "r", newer) }()
	waitFor(t, "the raise waiting for the write in flight", func() bool { return waiting(t, "r") >= base+1 })

	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	wrote := make(chan error, 1)
	go func() { wrote <- f.Do(ctx, "r", older, func(context.Context) error { return nil }) }()
	waitFor(t, "the same-epoch write waiting behind the raise", func() bool { return waiting(t, "r") >= base+2 })
	cancel()
	select {
	case err := <-wrote:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("a write whose context ended while it waited = %v, want context.Canceled", err)
		}
	case <-time.After(inProcessBound):
		t.Fatal("a same-epoch write waiting behind a raise did not give up when its context ended")
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if err := <-raised; err != nil {
		t.Fatalf("the raise after the abandoned write: %v", err)
	}
	if err := f.Do(bg, "r", older, nil); !errors.Is(err, storageguard.ErrStale) {
		t.Fatalf("the older epoch after the raise: %v, want ErrStale", err)
	}
}

// testNested: calls made from inside a write on the same resource, with
// the write's context, while a raise waits for that write: a same-epoch Do,
// Highest and Check are served, and a call that would raise is refused
// with ErrNestedRaise at once (it would wait for its own write). Then the
// write returns and the waiting raise goes through. A fence whose nested
// read lock queues behind the raise deadlocks here for good.
func testNested(t *testing.T, f storageguard.Fence, waiting func(t *testing.T, resource string) int) {
	bg := context.Background()
	older, newer, newest := ep(33, "a"), ep(34, "b"), ep(35, "c")
	if err := f.Admit(bg, "r", older); err != nil {
		t.Fatal(err)
	}
	base := waiting(t, "r")
	raised := make(chan error, 1)
	inner := make(chan error, 1)
	outer := make(chan error, 1)
	go func() {
		outer <- f.Do(bg, "r", older, func(ctx context.Context) error {
			go func() { raised <- f.Admit(bg, "r", newer) }()
			if err := awaitCond("the raise waiting for the write", func() bool { return waiting(t, "r") >= base+1 }); err != nil {
				inner <- nil
				return err
			}
			// A context derived from the write's is the write's too; its
			// bound only turns a nested call that waits for its own write
			// into a failure.
			sub, cancel := context.WithTimeout(ctx, inProcessBound)
			defer cancel()
			ran := false
			if err := f.Do(sub, "r", older, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
				return errors.Join(errors.New("a same-epoch Do nested in the write"), err)
			}
			if h, err := f.Highest(sub, "r"); err != nil || h != older {
				return errors.Join(errors.New("Highest nested in the write"), err)
			}
			if err := f.Check(sub, "r", older); err != nil {
				return errors.Join(errors.New("Check nested in the write"), err)
			}
			if err := f.Admit(sub, "r", newest); !errors.Is(err, storageguard.ErrNestedRaise) {
				return errors.Join(errors.New("a raise nested in the write: want ErrNestedRaise"), err)
			}
			inner <- nil
			return nil
		})
	}()
	select {
	case err := <-outer:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(inProcessBound):
		t.Fatal("a write that calls the fence for its own resource, with a raise waiting, never returned")
	}
	if err := <-inner; err != nil {
		t.Fatal(err)
	}
	if err := <-raised; err != nil {
		t.Fatalf("the raise waiting for the nested write: %v", err)
	}
	if h, err := f.Highest(bg, "r"); err != nil || h != newer {
		t.Fatalf("Highest = %v, %v; want %v (the refused nested raise changed it?)", h, err, newer)
	}
}

// testSameEpochRaisers: two writers of one epoch reach a resource whose
// highest is older and both find they must raise (both queue behind a
// write under the older epoch). Once it ends, the first raises and runs its
// write; the second's raise is no longer needed, and its write runs beside
// the first's rather than after it (writes under one epoch run
// concurrently). Each write waits for the other to start.
func testSameEpochRaisers(t *testing.T, f storageguard.Fence, waiting func(t *testing.T, resource string) int) {
	bg := context.Background()
	older, newer := ep(33, "a"), ep(34, "b")
	if err := f.Admit(bg, "r", older); err != nil {
		t.Fatal(err)
	}
	release := holdWrite(t, f, older)
	base := waiting(t, "r")
	entered := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	errs := make(chan error, 2)
	for i := range 2 {
		go func() {
			errs <- f.Do(bg, "r", newer, func(context.Context) error {
				close(entered[i])
				select {
				case <-entered[1-i]:
					return nil
				case <-time.After(inProcessBound):
					return errors.New("the second writer of the new epoch waited for the first's write")
				}
			})
		}()
		waitFor(t, "a writer of the new epoch waiting for the older write", func() bool { return waiting(t, "r") >= base+i+1 })
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}

	// The same, raced: raiserWriters writers find the older epoch at once,
	// before any queues for its raise, which no wait can be seen for (a
	// fence that serialises them hangs in some rounds, and a round that
	// hangs fails). Each write waits for all of them to be in. Each round
	// is a resource of its own.
	for round := range raiserRounds {
		r := fmt.Sprintf("raced-%d", round)
		if err := f.Admit(bg, r, older); err != nil {
			t.Fatal(err)
		}
		var in sync.WaitGroup
		in.Add(raiserWriters)
		all := make(chan struct{})
		go func() { in.Wait(); close(all) }()
		start := make(chan struct{})
		errs := make(chan error, raiserWriters)
		for range raiserWriters {
			go func() {
				<-start
				errs <- f.Do(bg, r, newer, func(context.Context) error {
					in.Done()
					select {
					case <-all:
						return nil
					case <-time.After(inProcessBound):
						return fmt.Errorf("round %d: a writer of the new epoch waited for another's write", round)
					}
				})
			}()
		}
		close(start)
		for range raiserWriters {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
}

// raiserRounds and raiserWriters size testSameEpochRaisers' raced rounds.
const raiserRounds, raiserWriters = 64, 8
