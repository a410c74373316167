package fencetest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// holdWindow is how long the hold tests give a broken fence to admit the
// newer epoch while the older write still runs. A fence that releases early
// does so within milliseconds of the cancel (database/sql rolls the
// transaction back at once); a correct fence never admits it, whatever the
// window, so a loaded machine can only hide a bug here, never fail a
// correct fence.
const holdWindow = 250 * time.Millisecond

// testCancelHolds: cancelling the caller's context while its write runs
// must not release the admission. The context bounds the wait to get in,
// never the hold: a newer epoch waits for the write to return, and Do then
// returns the write's result.
func testCancelHolds(t *testing.T, f storageguard.Fence) {
	CancelHolds(t, f, func(ctx context.Context, e epoch.Epoch, body func() error) error {
		return f.Do(ctx, "r", e, func(context.Context) error { return body() })
	})
}

// CancelHolds checks that do, a fence's way of running body under epoch e
// for resource "r" of f (its Do, or its Tx with body inside the
// transaction), holds the admission for as long as body runs even when
// ctx is cancelled meanwhile: an epoch raised through f.Do while the older
// body still runs must wait for it, and do must return body's result (nil).
// The SQL fences' tests run it over their Tx.
func CancelHolds(t *testing.T, f storageguard.Fence, do func(ctx context.Context, e epoch.Epoch, body func() error) error) {
	t.Helper()
	bg := context.Background()
	older, newer := ep(33, "a"), ep(34, "b")
	if err := f.Admit(bg, "r", older); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	entered, release := make(chan struct{}), make(chan struct{})
	var running, overlapped atomic.Bool
	olderDone := make(chan error, 1)
	go func() {
		first := true
		olderDone <- do(ctx, older, func() error {
			if !first {
				return nil // a retried transaction: the body already ran
			}
			first = false
			running.Store(true)
			close(entered)
			<-release
			running.Store(false)
			return nil
		})
	}()
	select {
	case <-entered:
	case err := <-olderDone:
		t.Fatalf("the older write never ran: %v", err)
	}
	// The injected fault: the caller goes away while its write runs (a
	// client disconnects, a deadline passes).
	cancel()
	newerDone := make(chan error, 1)
	go func() {
		newerDone <- f.Do(bg, "r", newer, func(context.Context) error {
			if running.Load() {
				overlapped.Store(true)
			}
			return nil
		})
	}()
	select {
	case err := <-newerDone:
		close(release)
		<-olderDone
		t.Fatalf("epoch %v was admitted (Do = %v) while the write under %v, whose context was cancelled, still ran: the fence let go of its hold when the context ended", newer, err, older)
	case <-time.After(holdWindow):
	}
	close(release)
	if err := <-olderDone; err != nil {
		t.Fatalf("the older write completed under its hold, but its call returned %v, want the write's nil", err)
	}
	if err := <-newerDone; err != nil {
		t.Fatalf("the newer epoch, after the older write returned: %v", err)
	}
	if overlapped.Load() {
		t.Fatal("the newer epoch's write ran beside the older one")
	}
}

// testContextBoundsWait: a raise waiting for a write under the older epoch
// gives up when its context ends (the context bounds the wait to get in),
// raises nothing, and leaves the fence working.
func testContextBoundsWait(t *testing.T, f storageguard.Fence) {
	bg := context.Background()
	older, newer := ep(33, "a"), ep(34, "b")
	if err := f.Admit(bg, "r", older); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	olderDone := make(chan error, 1)
	go func() {
		olderDone <- f.Do(bg, "r", older, func(context.Context) error {
			close(entered)
			<-release
			return nil
		})
	}()
	<-entered
	ctx, cancel := context.WithCancel(bg)
	raised := make(chan error, 1)
	go func() { raised <- f.Admit(ctx, "r", newer) }()
	// The raise is (or soon will be) waiting for the older write; its
	// caller gives up.
	time.AfterFunc(20*time.Millisecond, cancel)
	select {
	case err := <-raised:
		close(release)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("a raise whose context ended while it waited = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		close(release)
		<-olderDone
		<-raised
		t.Fatal("a raise waiting for an older write did not give up when its context ended")
	}
	if err := <-olderDone; err != nil {
		t.Fatal(err)
	}
	if h, err := f.Highest(bg, "r"); err != nil || h != older {
		t.Fatalf("Highest = %v, %v after an abandoned raise; want %v", h, err, older)
	}
	if err := f.Admit(bg, "r", newer); err != nil {
		t.Fatalf("the raise, again: %v", err)
	}
}
