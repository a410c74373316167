package objectfence_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// TestGetDuringWrites: readers racing writers of one key always get a
// whole object with the epoch it was written under, never an error: a read
// that pairs one write's metadata with another's bytes (versitygw reads
// them separately) is read again.
func TestGetDuringWrites(t *testing.T) {
	k := key(t)
	st := newStore(t, nil, nil)
	mustPut(t, st, k, "t1 0", ep("c", 1, "a"))
	var (
		wg   sync.WaitGroup
		stop atomic.Bool
		gets atomic.Int64
	)
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				o, err := st.Get(context.Background(), k)
				if err != nil {
					t.Errorf("Get during writes: %v", err)
					return
				}
				var term uint64
				var n int
				if _, err := fmt.Sscanf(string(o.Body), "t%d %d", &term, &n); err != nil || term != o.Epoch.Term {
					t.Errorf("Get returned %q under %s: bytes and epoch of different writes", o.Body, o.Epoch)
					return
				}
				gets.Add(1)
			}
		}()
	}
	w := newStore(t, nil, nil)
	for i := 1; i <= 60 && !t.Failed(); i++ {
		term := uint64(1 + i/10)
		mustPut(t, w, k, fmt.Sprintf("t%d %d", term, i), ep("c", term, "a"))
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d reads during 60 writes", gets.Load())
}
