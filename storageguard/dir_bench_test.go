//go:build unix

package storageguard_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/termfence/termfence/storageguard"
)

// BenchmarkDirSameEpoch sets a same-epoch Dir.Do (the process holds the
// resource's shared lock: no system call) beside the unguarded write it
// would typically protect, a map write under a mutex, serial and with
// b.RunParallel (target: Do-empty-write <= 2 µs).
func BenchmarkDirSameEpoch(b *testing.B) {
	ctx := context.Background()
	e := ep(7, "node-a")
	noop := func(context.Context) error { return nil }
	open := func(b *testing.B) *storageguard.Dir {
		d, err := storageguard.OpenDir(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { d.Close() })
		if err := d.Admit(ctx, "r", e); err != nil {
			b.Fatal(err)
		}
		return d
	}
	b.Run("baseline-mutex-map-write", func(b *testing.B) {
		mm := &mutexMap{m: map[string]int{}}
		for i := 0; b.Loop(); i++ {
			mm.write("r", i)
		}
	})
	b.Run("Do-empty-write", func(b *testing.B) {
		d := open(b)
		for b.Loop() {
			if err := d.Do(ctx, "r", e, noop); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Do-mutex-map-write", func(b *testing.B) {
		d := open(b)
		mm := &mutexMap{m: map[string]int{}}
		i := 0
		w := func(context.Context) error { mm.write("r", i); return nil }
		for b.Loop() {
			i++
			if err := d.Do(ctx, "r", e, w); err != nil {
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
		d := open(b)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := d.Do(ctx, "r", e, noop); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("parallel-Do-own-resource", func(b *testing.B) {
		d := open(b)
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			r := fmt.Sprintf("r%d", n.Add(1))
			if err := d.Admit(ctx, r, e); err != nil {
				b.Error(err)
				return
			}
			for pb.Next() {
				if err := d.Do(ctx, r, e, noop); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
