//go:build unix && !aix

package dirfence

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/termfence/termfence/epoch"
)

func iep(term uint64) epoch.Epoch { return epoch.Epoch{Cluster: "payments", Term: term, Leader: "a"} }

func iopen(t *testing.T, dir string, o Options) *Fence {
	t.Helper()
	f, err := OpenWith(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// failingSyncs fails the next sync of a kind and records the files synced.
type failingSyncs struct {
	mu     sync.Mutex
	fail   map[syncKind]int // how many syncs of each kind to fail
	failed []*os.File
	synced []*os.File
}

func (s *failingSyncs) hook(f *os.File, k syncKind) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail[k] > 0 {
		s.fail[k]--
		s.failed = append(s.failed, f)
		return unix.EIO
	}
	s.synced = append(s.synced, f)
	return nil
}

// TestFailedSyncNeverTrusted: a raise whose fdatasync fails is refused, and
// neither this process nor another one ever acts on the slot it wrote:
// both still see the previous highest, and the fence syncs through a newly
// opened descriptor afterwards (one that saw a write-back error may not
// report it again).
func TestFailedSyncNeverTrusted(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := iopen(t, dir, Options{})
	if err := d.Admit(ctx, "r", iep(5)); err != nil {
		t.Fatal(err)
	}
	fs := &failingSyncs{fail: map[syncKind]int{syncData: 1}}
	d.syncHook = fs.hook
	if err := d.Admit(ctx, "r", iep(6)); !errors.Is(err, unix.EIO) {
		t.Fatalf("raise with a failing fdatasync = %v, want EIO", err)
	}
	fs.mu.Lock()
	mark := len(fs.synced) // the failed raise's own restore of the slot
	fs.mu.Unlock()
	// Another handle on the directory (as another process would read it)
	// and this one: the failed slot is not the highest.
	other := iopen(t, dir, Options{})
	if h, err := other.Highest(ctx, "r"); err != nil || h != iep(5) {
		t.Fatalf("another handle after the failed sync: Highest = %v, %v; want %v", h, err, iep(5))
	}
	if h, err := d.Highest(ctx, "r"); err != nil || h != iep(5) {
		t.Fatalf("after the failed sync: Highest = %v, %v; want %v", h, err, iep(5))
	}
	if err := d.Do(ctx, "r", iep(5), func(context.Context) error { return nil }); err != nil {
		t.Fatalf("epoch 5 after the failed raise to 6: %v", err)
	}
	// The raise goes through once the disk works, on a new descriptor.
	if err := d.Admit(ctx, "r", iep(6)); err != nil {
		t.Fatal(err)
	}
	fs.mu.Lock()
	for _, f := range fs.synced[mark:] {
		if f == fs.failed[0] {
			t.Errorf("the descriptor whose sync failed (%s) was synced again instead of reopened", f.Name())
		}
	}
	fs.mu.Unlock()
	if h, err := other.Highest(ctx, "r"); err != nil || h != iep(6) {
		t.Fatalf("another handle after the raise: Highest = %v, %v; want %v", h, err, iep(6))
	}
}

// TestFailedDirSyncOnCreate: the first raise of a resource whose directory
// fsync fails leaves no fence file for anyone to trust.
func TestFailedDirSyncOnCreate(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := iopen(t, dir, Options{})
	d.syncHook = (&failingSyncs{fail: map[syncKind]int{syncDir: 1}}).hook
	if err := d.Admit(ctx, "r", iep(3)); !errors.Is(err, unix.EIO) {
		t.Fatalf("first raise with a failing directory fsync = %v, want EIO", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, fileName("r"))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the fence file whose link may not be durable is still there: %v", err)
	}
	other := iopen(t, dir, Options{})
	if h, err := other.Highest(ctx, "r"); err != nil || !h.IsZero() {
		t.Fatalf("another handle: Highest = %v, %v; want none", h, err)
	}
	if err := d.Admit(ctx, "r", iep(3)); err != nil {
		t.Fatal(err)
	}
	if h, err := other.Highest(ctx, "r"); err != nil || h != iep(3) {
		t.Fatalf("another handle after the raise: Highest = %v, %v", h, err)
	}
}

// TestSymlinksRefused: a symbolic link planted in the fence directory, in
// place of a fence file or an intent file, is never followed: the fence
// refuses the resource (ErrNotRegular) and creates or changes nothing
// where the link points.
func TestSymlinksRefused(t *testing.T) {
	ctx := context.Background()
	for _, which := range []string{"fence", "intent"} {
		t.Run(which, func(t *testing.T) {
			dir, outside := t.TempDir(), t.TempDir()
			name := fileName("r")
			if which == "intent" {
				name = name[:len(name)-len(fenceSuffix)] + intentSuffix
			}
			target := filepath.Join(outside, "planted")
			if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
			d := iopen(t, dir, Options{})
			if err := d.Admit(ctx, "r", iep(1)); !errors.Is(err, ErrNotRegular) {
				t.Fatalf("Admit through a planted %s link = %v, want ErrNotRegular", which, err)
			}
			if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the fence created the link's target: %v", err)
			}
			if which == "fence" {
				if _, err := d.Highest(ctx, "other-unknown"); err != nil {
					t.Fatal(err)
				}
				if _, err := iopen(t, dir, Options{}).Highest(ctx, "r"); !errors.Is(err, ErrNotRegular) {
					t.Fatalf("Highest through a planted link = %v, want ErrNotRegular", err)
				}
			}
			// An existing file outside is not written either.
			if err := os.WriteFile(target, []byte("precious"), 0o644); err != nil {
				t.Fatal(err)
			}
			_ = d.Admit(ctx, "r", iep(2))
			if b, _ := os.ReadFile(target); string(b) != "precious" {
				t.Fatalf("the file behind the link was changed: %q", b)
			}
		})
	}
}

// TestFileModes: the files the fence creates are 0600 unless configured,
// and a mode that would lock the owner out is refused.
func TestFileModes(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		opt, want os.FileMode
	}{{0, 0o600}, {0o640, 0o640}} {
		dir := filepath.Join(t.TempDir(), "fences")
		d := iopen(t, dir, Options{FileMode: c.opt})
		if err := d.Admit(ctx, "r", iep(1)); err != nil {
			t.Fatal(err)
		}
		name := fileName("r")
		for _, n := range []string{name, name[:len(name)-len(fenceSuffix)] + intentSuffix} {
			st, err := os.Stat(filepath.Join(dir, n))
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Mode().Perm(); got != c.want {
				t.Errorf("FileMode %#o: %s has mode %#o, want %#o", c.opt, n, got, c.want)
			}
		}
		st, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if want := c.want | (c.want&0o444)>>2; st.Mode().Perm() != want {
			t.Errorf("FileMode %#o: created directory has mode %#o, want %#o", c.opt, st.Mode().Perm(), want)
		}
	}
	for _, bad := range []os.FileMode{0o400, 0o200, 0o4600, os.ModeSymlink | 0o600} {
		if err := (Options{FileMode: bad}).Validate(); err == nil {
			t.Errorf("FileMode %v accepted", bad)
		}
	}
}
