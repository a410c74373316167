package fencetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/termfence/termfence/storageguard"
)

// mutexMap is the unguarded baseline: a map write under one mutex.
type mutexMap struct {
	mu sync.Mutex
	m  map[string]int
}

func (m *mutexMap) write(k string, v int) {
	m.mu.Lock()
	m.m[k] = v
	m.mu.Unlock()
}

// BenchSameEpoch sets a same-epoch Do of the fence open returns beside the
// unguarded write it would typically protect, a map write under a mutex,
// serial and with b.RunParallel (on one resource, and each goroutine on a
// resource of its own). The fence is closed when the sub-benchmark ends.
func BenchSameEpoch(b *testing.B, open func(b *testing.B) storageguard.Fence) {
	ctx := context.Background()
	e := ep(7, "node-a")
	noop := func(context.Context) error { return nil }
	admitted := func(b *testing.B) storageguard.Fence {
		f := open(b)
		b.Cleanup(func() { f.Close() })
		if err := f.Admit(ctx, "r", e); err != nil {
			b.Fatal(err)
		}
		return f
	}
	b.Run("baseline-mutex-map-write", func(b *testing.B) {
		mm := &mutexMap{m: map[string]int{}}
		for i := 0; b.Loop(); i++ {
			mm.write("r", i)
		}
	})
	b.Run("Do-empty-write", func(b *testing.B) {
		f := admitted(b)
		for b.Loop() {
			if err := f.Do(ctx, "r", e, noop); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Do-mutex-map-write", func(b *testing.B) {
		f := admitted(b)
		mm := &mutexMap{m: map[string]int{}}
		i := 0
		w := func(context.Context) error { mm.write("r", i); return nil }
		for b.Loop() {
			i++
			if err := f.Do(ctx, "r", e, w); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel-baseline-mutex-map-write", func(b *testing.B) {
		mm := &mutexMap{m: map[string]int{}}
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				mm.write("r", i)
			}
		})
	})
	b.Run("parallel-Do-one-resource", func(b *testing.B) {
		f := admitted(b)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := f.Do(ctx, "r", e, noop); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("parallel-Do-own-resource", func(b *testing.B) {
		f := admitted(b)
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			r := fmt.Sprintf("r%d", n.Add(1))
			if err := f.Admit(ctx, r, e); err != nil {
				b.Error(err)
				return
			}
			for pb.Next() {
				if err := f.Do(ctx, r, e, noop); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchDurable sets a durable fence's same-epoch Do ("Do-same-epoch", no
// disk write) and its raise ("raise", one durable record each) beside the
// baseline of one write and fsync of a small file ("baseline-write-fsync").
// open returns a fence whose state lives in dir, a fresh directory.
func BenchDurable(b *testing.B, open func(b *testing.B, dir string) storageguard.Fence) {
	ctx := context.Background()
	noop := func(context.Context) error { return nil }
	b.Run("Do-same-epoch", func(b *testing.B) {
		f := open(b, b.TempDir())
		defer f.Close()
		e := ep(7, "node-a")
		if err := f.Admit(ctx, "r", e); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if err := f.Do(ctx, "r", e, noop); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raise", func(b *testing.B) {
		f := open(b, b.TempDir())
		defer f.Close()
		t := uint64(0)
		for b.Loop() {
			t++
			if err := f.Admit(ctx, "r", ep(t, "node-a")); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline-write-fsync", func(b *testing.B) {
		fh, err := os.Create(filepath.Join(b.TempDir(), "x"))
		if err != nil {
			b.Fatal(err)
		}
		defer fh.Close()
		for b.Loop() {
			if _, err := fh.WriteAt([]byte("payments/7/node-a\n"), 0); err != nil {
				b.Fatal(err)
			}
			if err := fh.Sync(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
