package storageguard_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/fencetest"
)

// mapStore is a Store in a map that outlives the fences over it, standing
// for a durable record. failRaise, if set, decides each Raise's fate: its
// error, and whether the record was written anyway (a write that happened
// but was not known to be durable).
type mapStore struct {
	mu        sync.Mutex
	m         map[string]epoch.Epoch
	loads     int
	failLoad  error
	failRaise func(ep epoch.Epoch) (err error, written bool)
}

func newMapStore() *mapStore { return &mapStore{m: map[string]epoch.Epoch{}} }

func (s *mapStore) Load(_ context.Context, resource string) (epoch.Epoch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loads++
	if s.failLoad != nil {
		return epoch.Epoch{}, s.failLoad
	}
	return s.m[resource], nil
}

func (s *mapStore) Raise(_ context.Context, resource string, ep epoch.Epoch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.m[resource]; !h.IsZero() && ep.Term <= h.Term {
		// Cached promised never to do this.
		panic("Raise of " + resource + " to " + ep.String() + ", not newer than " + h.String())
	}
	if s.failRaise != nil {
		err, written := s.failRaise(ep)
		if written {
			s.m[resource] = ep
		}
		if err != nil {
			return err
		}
	}
	s.m[resource] = ep
	return nil
}

func TestCached(t *testing.T) {
	var s *mapStore
	var last *storageguard.Cached // the fence the running subtest opened
	open := func(t *testing.T) storageguard.Fence {
		c := storageguard.NewCached(s)
		t.Cleanup(func() { c.Close() })
		last = c
		return c
	}
	fencetest.Run(t, fencetest.Kind{
		Open: func(t *testing.T) storageguard.Fence {
			s = newMapStore()
			return open(t)
		},
		Reopen:           open,
		Waiting:          func(*testing.T) int { return last.Waiting("r") },
		InProcessWaiting: func(_ *testing.T, r string) int { return last.Waiting(r) },
		Goroutines:       16, Ops: 300,
	})
}

// TestCachedRaiseFails: a Raise that failed leaves nothing cached; the fence
// reads the store again before it decides, so a raise written but reported
// as failed is not forgotten (the older epochs stay refused), and one that
// never reached the store is not assumed.
func TestCachedRaiseFails(t *testing.T) {
	ctx := context.Background()
	s := newMapStore()
	c := storageguard.NewCached(s)
	defer c.Close()
	if err := c.Admit(ctx, "r", ep(3, "a")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("sync failed")
	s.failRaise = func(ep epoch.Epoch) (error, bool) { return boom, ep.Term == 5 }
	ran := false
	if err := c.Do(ctx, "r", ep(5, "b"), func(context.Context) error { ran = true; return nil }); !errors.Is(err, boom) || ran {
		t.Fatalf("Do over a failing Raise = %v (write ran: %v), want the store's error", err, ran)
	}
	if h, err := c.Highest(ctx, "r"); err != nil || h != ep(5, "b") {
		t.Fatalf("Highest after a Raise that wrote and failed = %v, %v; want the store's record %v", h, err, ep(5, "b"))
	}
	if err := c.Do(ctx, "r", ep(4, "a"), func(context.Context) error { ran = true; return nil }); !errors.Is(err, storageguard.ErrStale) || ran {
		t.Fatalf("epoch 4 after the store recorded 5: %v (write ran: %v), want ErrStale", err, ran)
	}
	// A Raise that failed before writing: the old record stands.
	if err := c.Admit(ctx, "r", ep(6, "c")); !errors.Is(err, boom) {
		t.Fatalf("Admit(6) = %v", err)
	}
	if err := c.Do(ctx, "r", ep(5, "b"), func(context.Context) error { return nil }); err != nil {
		t.Fatalf("epoch 5 after a Raise to 6 that wrote nothing: %v", err)
	}
	s.failRaise = nil
	if err := c.Admit(ctx, "r", ep(6, "c")); err != nil {
		t.Fatal(err)
	}
}

// TestCachedLoadFails: a store that cannot be read refuses with its error
// and runs no write; once it can be read again the fence works.
func TestCachedLoadFails(t *testing.T) {
	ctx := context.Background()
	s := newMapStore()
	s.m["r"] = ep(7, "a")
	boom := errors.New("disk gone")
	s.failLoad = boom
	c := storageguard.NewCached(s)
	defer c.Close()
	ran := false
	if err := c.Do(ctx, "r", ep(7, "a"), func(context.Context) error { ran = true; return nil }); !errors.Is(err, boom) || ran {
		t.Fatalf("Do over a failing Load = %v (write ran: %v)", err, ran)
	}
	if _, err := c.Highest(ctx, "r"); !errors.Is(err, boom) {
		t.Fatalf("Highest over a failing Load = %v", err)
	}
	s.failLoad = nil
	if err := c.Do(ctx, "r", ep(6, "a"), func(context.Context) error { ran = true; return nil }); !errors.Is(err, storageguard.ErrStale) || ran {
		t.Fatalf("epoch 6 under a stored 7: %v (write ran: %v)", err, ran)
	}
	// Loaded once, then decided in memory.
	n := s.loads
	for range 10 {
		if err := c.Do(ctx, "r", ep(7, "a"), func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if s.loads != n {
		t.Fatalf("%d Loads for 10 same-epoch writes; the cache should answer them", s.loads-n)
	}
}

// TestCachedCloseWaits: with a Store, Close returns only after the writes in
// progress have, so that the store can be released after it.
func TestCachedCloseWaits(t *testing.T) {
	c := storageguard.NewCached(newMapStore())
	ctx := context.Background()
	entered, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- c.Do(ctx, "r", ep(3, "a"), func(context.Context) error {
			close(entered)
			<-release
			return nil
		})
	}()
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a write was running", err)
	case <-time.After(50 * time.Millisecond): // the injected fault: a write that stalls
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}
