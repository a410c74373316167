//go:build unix && !aix

package dirfence_test

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/dirfence"
	"github.com/termfence/termfence/storageguard/fencetest"
)

// BenchmarkDirSyscalls measures the system calls a Fence.Do pays when it
// takes the resource's shared lock from scratch (flock shared + unlock, one
// pread of the two slots; the intent lock adds another flock pair), and a
// trivial system call. A same-epoch Do while the process holds the lock
// makes none (BenchmarkDirSameEpoch).
func BenchmarkDirSyscalls(b *testing.B) {
	fh, err := os.Create(filepath.Join(b.TempDir(), "x"))
	if err != nil {
		b.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.Write(make([]byte, 4608)); err != nil {
		b.Fatal(err)
	}
	fd := int(fh.Fd())
	b.Run("flock-shared-and-unlock", func(b *testing.B) {
		for b.Loop() {
			unix.Flock(fd, unix.LOCK_SH)
			unix.Flock(fd, unix.LOCK_UN)
		}
	})
	b.Run("pread-4608", func(b *testing.B) {
		buf := make([]byte, 4608)
		for b.Loop() {
			unix.Pread(fd, buf, 0)
		}
	})
	b.Run("fstat", func(b *testing.B) {
		var st unix.Stat_t
		for b.Loop() {
			unix.Fstat(fd, &st)
		}
	})
	b.Run("getppid", func(b *testing.B) {
		for b.Loop() {
			unix.Getppid()
		}
	})
}

// BenchmarkDir sets a same-epoch Do and a raise beside one write and fsync
// of a small file (fencetest.BenchDurable).
func BenchmarkDir(b *testing.B) {
	fencetest.BenchDurable(b, func(b *testing.B, dir string) storageguard.Fence {
		f, err := dirfence.Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		return f
	})
}

// BenchmarkDirSameEpoch sets a same-epoch Do (the process holds the
// resource's shared lock: no system call) beside the unguarded write it
// would typically protect, a map write under a mutex, serial and with
// b.RunParallel (target: Do-empty-write <= 2 µs).
func BenchmarkDirSameEpoch(b *testing.B) {
	fencetest.BenchSameEpoch(b, func(b *testing.B) storageguard.Fence {
		d, err := dirfence.Open(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		return d
	})
}
