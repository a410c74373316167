package powerfs

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// SkipEnv, set to anything, makes MountTest skip with a message instead of
// failing where FUSE is missing. Without it MountTest skips only where
// FUSE is unavailable (no /dev/fuse, not root).
const SkipEnv = "TERMFENCE_NO_POWERFS"

// SeedEnv, set to a number, is the seed MountTest uses when Options.Seed
// is zero: it replays the disk's random choices of a logged run.
const SeedEnv = "TERMFENCE_POWERFS_SEED"

// MountTest mounts a power-loss filesystem for t in a directory of its
// own and unmounts it when t ends (ending every process still on it). It
// skips t, saying why, where FUSE mounts are unavailable (no /dev/fuse, not
// root) or when SkipEnv is set; any other failure to mount fails t. The
// seed is logged, so that a failure can be replayed with Options.Seed or
// SeedEnv.
func MountTest(t testing.TB, opts Options) *Disk {
	t.Helper()
	if os.Getenv(SkipEnv) != "" {
		t.Skipf("powerfs: %s is set", SkipEnv)
	}
	if err := Available(); err != nil {
		t.Skipf("power-loss tests skipped: %v", err)
	}
	if v := os.Getenv(SeedEnv); v != "" && opts.Seed == 0 {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("powerfs: %s=%q: %v", SeedEnv, v, err)
		}
		opts.Seed = seed
	}
	dir := filepath.Join(t.TempDir(), "mnt")
	d, err := Mount(dir, opts)
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("power-loss tests skipped: %v", err)
	}
	if err != nil {
		t.Fatalf("powerfs: %v", err)
	}
	t.Logf("powerfs mounted at %s, seed %d", d.Dir(), d.Seed())
	t.Cleanup(func() {
		if err := d.Unmount(); err != nil {
			t.Errorf("powerfs: %v", err)
		}
	})
	return d
}
