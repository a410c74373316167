package objectfence_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/objectfence"
	"github.com/termfence/termfence/storageguard"
)

// landed is one write that Put reported as landed.
type landed struct {
	res  objectfence.Result
	body string
}

// checkChain is the oracle for the writes of one key: the writes that
// landed form one chain from "no object" (each replaced exactly the one
// before it, as the ETags they report say), the epochs along it never go
// down, and the key holds the last one.
func checkChain(t *testing.T, st *objectfence.Store, k string, ws []landed) {
	t.Helper()
	next := map[string]landed{}
	for _, w := range ws {
		if _, dup := next[w.res.Replaced]; dup {
			t.Fatalf("two writes that landed replaced the same object %q: a lost update", w.res.Replaced)
		}
		next[w.res.Replaced] = w
	}
	var (
		at   = ""
		prev epoch.Epoch
		last landed
	)
	for i := 0; i < len(ws); i++ {
		w, ok := next[at]
		if !ok {
			t.Fatalf("chain of landed writes breaks after %d of %d (at ETag %q)", i, len(ws), at)
		}
		if w.res.Epoch.Term < prev.Term {
			t.Fatalf("write %d of the chain landed under %s after a write under %s", i, w.res.Epoch, prev)
		}
		if w.res.Previous != prev {
			t.Fatalf("write %d reports replacing an object of %s, the chain says %s", i, w.res.Previous, prev)
		}
		prev, last, at = w.res.Epoch, w, w.res.ETag
	}
	if len(ws) > 0 {
		wantObject(t, st, k, last.body, last.res.Epoch)
		if got := headETag(t, k); got != last.res.ETag {
			t.Fatalf("key holds ETag %q, the chain ends at %q", got, last.res.ETag)
		}
	}
}

// TestTwoEpochsRandomized: writers of an older and a newer epoch write one
// key concurrently, at random moments, some pausing between their read and
// their write; the older epoch never lands after the newer one did.
func TestTwoEpochsRandomized(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	for round := 0; round < 6; round++ {
		k := key(t)
		old, new := ep("c", uint64(2+round), "a"), ep("c", uint64(3+round), "b")
		writers := 3 + rng.IntN(4)
		var (
			mu        sync.Mutex
			ws        []landed
			wg        sync.WaitGroup
			newLanded = make(chan struct{})
			once      sync.Once
		)
		for w := 0; w < writers; w++ {
			e := old
			if w%2 == 1 {
				e = new
			}
			puts := 1 + rng.IntN(4)
			yields := rng.IntN(50)
			// Some older writers wait, between their read and their
			// write, until a newer write has landed.
			pause := e == old && rng.IntN(2) == 0
			h := &hooked{API: server(t).Client()}
			if pause {
				h.beforePut = func(ctx context.Context, _ *s3.PutObjectInput) {
					select {
					case <-newLanded:
					case <-ctx.Done():
					}
				}
			}
			st := newStore(t, h, func(c *objectfence.Config) {
				if rng.IntN(2) == 0 {
					c.CacheSize = -1
				}
			})
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < yields; i++ {
					runtime.Gosched()
				}
				for p := 0; p < puts; p++ {
					body := fmt.Sprintf("%s#%d.%d", e, w, p)
					res, err := st.Put(context.Background(), k, []byte(body), tok(e))
					switch {
					case err == nil:
						mu.Lock()
						ws = append(ws, landed{res, body})
						mu.Unlock()
						if e == new {
							once.Do(func() { close(newLanded) })
						}
					case e == old && errors.Is(err, storageguard.ErrStale):
						return // deposed for good
					case errors.Is(err, objectfence.ErrContention):
					default:
						t.Errorf("writer %d under %s: %v", w, e, err)
						return
					}
				}
				if e == new {
					once.Do(func() { close(newLanded) }) // even if all lost
				}
			}()
		}
		wg.Wait()
		checkChain(t, newStore(t, nil, nil), k, ws)
	}
}

// TestManyWritersOneEpoch: writers of one epoch do not refuse each other;
// each Put lands or reports ErrContention, and no landed write is lost.
func TestManyWritersOneEpoch(t *testing.T) {
	k := key(t)
	e := ep("c", 7, "a")
	const writers, puts = 12, 3
	var (
		mu sync.Mutex
		ws []landed
		wg sync.WaitGroup
	)
	st := newStore(t, nil, nil) // one Store, shared: its cache too
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := 0; p < puts; p++ {
				body := fmt.Sprintf("w%d.%d", w, p)
				for {
					res, err := st.Put(context.Background(), k, []byte(body), tok(e))
					if errors.Is(err, objectfence.ErrContention) {
						continue // the test insists: every write lands in the end
					}
					if err != nil {
						t.Errorf("writer %d: %v", w, err)
						return
					}
					mu.Lock()
					ws = append(ws, landed{res, body})
					mu.Unlock()
					break
				}
			}
		}()
	}
	wg.Wait()
	if len(ws) != writers*puts {
		t.Fatalf("%d writes landed, want %d", len(ws), writers*puts)
	}
	checkChain(t, st, k, ws)
}
