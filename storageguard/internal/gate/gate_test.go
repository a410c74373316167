package gate

import (
	"context"
	"errors"
	"testing"
	"time"
)

// bound turns a wait that never ends into a failure; every wait below ends
// on an event first when the gate is right.
const bound = 20 * time.Second

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s never happened", what)
		}
		time.Sleep(time.Millisecond) // poll interval
	}
}

func result(t *testing.T, what string, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(bound):
		t.Fatalf("%s never returned", what)
		return nil
	}
}

// A shared caller held back by a queued exclusive waiter gives up with its
// context, and leaves nothing behind.
func TestShareHonoursContext(t *testing.T) {
	var g Gate
	bg := context.Background()
	if _, err := g.Share(bg); err != nil {
		t.Fatal(err)
	}
	gen := g.Gen()
	locked := make(chan error, 1)
	go func() {
		ok, err := g.Lock(bg, gen)
		if err == nil && !ok {
			err = errors.New("Lock stepped aside with no exclusive hold ended")
		}
		locked <- err
	}()
	waitUntil(t, "the exclusive waiter queued", func() bool { return g.Waiting() == 1 })
	ctx, cancel := context.WithCancel(bg)
	shared := make(chan error, 1)
	go func() { _, err := g.Share(ctx); shared <- err }()
	waitUntil(t, "the shared caller waiting", func() bool { return g.Waiting() == 2 })
	cancel()
	if err := result(t, "Share", shared); !errors.Is(err, context.Canceled) {
		t.Fatalf("Share = %v, want context.Canceled", err)
	}
	if g.Waiting() != 1 {
		t.Fatalf("Waiting = %d after the shared caller gave up, want 1", g.Waiting())
	}
	g.Unshare()
	if err := result(t, "Lock", locked); err != nil {
		t.Fatal(err)
	}
	g.Unlock()
}

// An exclusive waiter that gives up leaves the queue: the shared callers
// it held back go on, and the next exclusive caller is not behind it.
func TestLockHonoursContext(t *testing.T) {
	var g Gate
	bg := context.Background()
	if _, err := g.Share(bg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	locked := make(chan error, 1)
	go func() { _, err := g.Lock(ctx, g.Gen()); locked <- err }()
	waitUntil(t, "the exclusive waiter queued", func() bool { return g.Waiting() == 1 })
	shared := make(chan error, 1)
	go func() { _, err := g.Share(bg); shared <- err }()
	waitUntil(t, "the shared caller held back", func() bool { return g.Waiting() == 2 })
	cancel()
	if err := result(t, "Lock", locked); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock = %v, want context.Canceled", err)
	}
	if err := result(t, "Share behind the abandoned Lock", shared); err != nil {
		t.Fatal(err)
	}
	g.Unshare()
	g.Unshare()
	if ok, err := g.Lock(bg, g.Gen()); !ok || err != nil {
		t.Fatalf("Lock on an idle gate = %v, %v", ok, err)
	}
	g.Unlock()
}

// A call nested in a shared hold, with the hold's context, joins it past a
// queued exclusive waiter; Held says an exclusive wait would be for itself;
// once the hold ended, the same context is an ordinary one.
func TestNestedJoins(t *testing.T) {
	var g, other Gate
	bg := context.Background()
	if _, err := g.Share(bg); err != nil {
		t.Fatal(err)
	}
	var kept context.Context
	locked := make(chan error, 1)
	err := g.Run(bg, func(ctx context.Context) error {
		kept = ctx
		if !g.Held(ctx) || other.Held(ctx) || g.Held(bg) {
			t.Error("Held: wrong gate or context")
		}
		gen := g.Gen()
		go func() { _, err := g.Lock(bg, gen); locked <- err }()
		waitUntil(t, "the exclusive waiter queued", func() bool { return g.Waiting() == 1 })
		sub, cancel := context.WithCancel(ctx)
		defer cancel()
		joined := make(chan error, 1)
		go func() { _, err := g.Share(sub); joined <- err }()
		if err := result(t, "a nested Share", joined); err != nil {
			return err
		}
		g.Unshare()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := result(t, "the exclusive waiter", locked); err != nil {
		t.Fatal(err)
	}
	if g.Held(kept) {
		t.Fatal("Held reports a hold that ended")
	}
	ctx, cancel := context.WithCancel(kept)
	cancel()
	if _, err := g.Share(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Share with the context of an ended hold, under an exclusive hold = %v, want context.Canceled", err)
	}
	g.Unlock()
}

// An exclusive waiter steps aside once an exclusive hold that went before
// it ended, even while that hold goes on as a shared one (Downgrade): it
// decides again instead of waiting for the shared hold.
func TestLockStepsAside(t *testing.T) {
	var g Gate
	bg := context.Background()
	gen := g.Gen()
	if ok, err := g.Lock(bg, gen); !ok || err != nil {
		t.Fatalf("Lock = %v, %v", ok, err)
	}
	second := make(chan error, 1)
	go func() {
		ok, err := g.Lock(bg, gen)
		if err == nil && ok {
			err = errors.New("the second Lock got the exclusive side, after waiting for the first's shared hold")
		}
		second <- err
	}()
	waitUntil(t, "the second exclusive caller queued", func() bool { return g.Waiting() == 1 })
	g.Downgrade()
	if err := result(t, "the second Lock", second); err != nil {
		t.Fatal(err)
	}
	g.Unshare()
	if ok, err := g.Lock(bg, gen); ok || err != nil {
		t.Fatalf("Lock with a gen from before an exclusive hold = %v, %v; want false, nil", ok, err)
	}
}

// Exclusive waiters go in the order they queued: the first queued gets the
// exclusive side, and the others, seeing an exclusive hold end, step aside.
func TestLockInOrder(t *testing.T) {
	var g Gate
	bg := context.Background()
	if _, err := g.Share(bg); err != nil {
		t.Fatal(err)
	}
	gen := g.Gen()
	order := make(chan int, 3)
	done := make(chan error, 3)
	for i := range 3 {
		go func() {
			ok, err := g.Lock(bg, gen)
			if ok {
				order <- i
				g.Unlock()
			}
			done <- err
		}()
		waitUntil(t, "the exclusive caller queued", func() bool { return g.Waiting() == i+1 })
	}
	g.Unshare()
	for range 3 {
		if err := result(t, "Lock", done); err != nil {
			t.Fatal(err)
		}
	}
	close(order)
	if first := <-order; first != 0 {
		t.Fatalf("caller %d went first, want the first queued (0)", first)
	}
}
