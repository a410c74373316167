//go:build unix

package storageguard_test

import (
	"testing"

	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/fencetest"
)

// BenchmarkDirSameEpoch sets a same-epoch Dir.Do (the process holds the
// resource's shared lock: no system call) beside the unguarded write it
// would typically protect, a map write under a mutex, serial and with
// b.RunParallel (target: Do-empty-write <= 2 µs).
func BenchmarkDirSameEpoch(b *testing.B) {
	fencetest.BenchSameEpoch(b, func(b *testing.B) storageguard.Fence {
		d, err := storageguard.OpenDir(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		return d
	})
}
