package storageguard_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/fencetest"
)

func TestMemory(t *testing.T) {
	var last *storageguard.Memory // the fence the running subtest opened
	fencetest.Run(t, fencetest.Kind{
		Open: func(t *testing.T) storageguard.Fence {
			m := storageguard.NewMemory()
			t.Cleanup(func() { m.Close() })
			last = m
			return m
		},
		Waiting:          func(*testing.T) int { return last.Waiting("r") },
		InProcessWaiting: func(_ *testing.T, r string) int { return last.Waiting(r) },
		Goroutines:       32, Ops: 2000,
	})
}

// BenchmarkMemory compares a same-epoch Memory.Do with the mutex-guarded
// map write it would typically protect (target: Do <= 2x baseline), serial
// and with b.RunParallel.
func BenchmarkMemory(b *testing.B) {
	fencetest.BenchSameEpoch(b, func(*testing.B) storageguard.Fence { return storageguard.NewMemory() })
}

// BenchmarkMemoryMillionResources reports the heap a Memory fence needs for
// 1,000,000 resources (target: under 256 MB) as the metric MB/1e6-resources.
// It is a benchmark, not a test, because building it under -race is slow.
func BenchmarkMemoryMillionResources(b *testing.B) {
	const n = 1_000_000
	ctx := context.Background()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("resource-%07d", i)
	}
	e := ep(7, "node-a")
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		m := storageguard.NewMemory()
		for _, name := range names {
			if err := m.Admit(ctx, name, e); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if h, _ := m.Highest(ctx, names[n-1]); h != e {
			b.Fatalf("Highest = %v", h)
		}
		runtime.KeepAlive(m)
		used := float64(after.HeapAlloc) - float64(before.HeapAlloc)
		b.ReportMetric(used/(1<<20), "MB/1e6-resources")
		b.ReportMetric(used/n, "B/resource")
		if used > 256<<20 {
			b.Errorf("Memory with %d resources uses %.0f MB, more than 256 MB", n, used/(1<<20))
		}
	}
}
