//go:build unix && !aix

package dirfence_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/dirfence"
	"github.com/termfence/termfence/storageguard/fencetest"
)

func open(t *testing.T, dir string) *dirfence.Fence {
	t.Helper()
	return openWith(t, dir, dirfence.Options{})
}

func openWith(t *testing.T, dir string, o dirfence.Options) *dirfence.Fence {
	t.Helper()
	d, err := dirfence.OpenWith(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// fenceFile returns the one fence file in dir.
func fenceFile(t *testing.T, dir string) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.fence"))
	if len(files) != 1 {
		t.Fatalf("fence files: %v", files)
	}
	return files[0]
}

func TestFence(t *testing.T) {
	var dir string
	var last *dirfence.Fence // the fence the running subtest opened
	fencetest.Run(t, fencetest.Kind{
		Open: func(t *testing.T) storageguard.Fence {
			dir = t.TempDir()
			last = open(t, dir)
			return last
		},
		Reopen:     func(t *testing.T) storageguard.Fence { return open(t, dir) },
		Goroutines: 16, Ops: 300,
		// A raise waiting for another process's writes waits in flock(2),
		// which a context does not interrupt (doc.go says so); waits for
		// this process's writes end with the context, which
		// InProcessWaiting's tests check.
		WaitIgnoresContext: true,
		Waiting:            func(*testing.T) int { return last.Waiting("r") },
		InProcessWaiting:   func(_ *testing.T, r string) int { return last.Waiting(r) },
	})
}

// TestMultiProcess: processes that share the directory never let an older
// epoch's write overlap a newer one's.
func TestMultiProcess(t *testing.T) {
	t.Parallel()
	fencetest.MultiProcess(t, durable)
}

// TestCrashDurability: no acknowledged raise is lost to a SIGKILL, however
// the raise was torn.
func TestCrashDurability(t *testing.T) {
	t.Parallel()
	fencetest.CrashDurability(t, durable)
}

// TestNamesStayInside: every resource name, however hostile, maps to a
// file directly inside the fence directory.
func TestNamesStayInside(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "fence")
	d := open(t, dir)
	ctx := context.Background()
	names := []string{"../outside", "../../etc/passwd", "/abs", "a/../../b", ".", "..", "\x00", strings.Repeat("../", 300)}
	for i, n := range names {
		if err := d.Admit(ctx, n, ep(uint64(i+1), "a")); err != nil {
			t.Fatalf("Admit(%q) = %v", n, err)
		}
	}
	outside, _ := os.ReadDir(root)
	if len(outside) != 1 || outside[0].Name() != "fence" {
		t.Fatalf("files outside the fence dir: %v", outside)
	}
	// One fence file and one intent file per name.
	inside, _ := os.ReadDir(dir)
	var fences, intents int
	for _, e := range inside {
		switch filepath.Ext(e.Name()) {
		case ".fence":
			fences++
		case ".intent":
			intents++
		}
	}
	if fences != len(names) || intents != len(names) || len(inside) != 2*len(names) {
		var got []string
		for _, e := range inside {
			got = append(got, e.Name())
		}
		t.Fatalf("fence dir holds %d files (%d fence, %d intent), want %d of each: %v", len(inside), fences, intents, len(names), got)
	}
}

// TestTwoHandles: two fences on one directory behave like two
// processes (flock locks open file descriptions, not processes).
func TestTwoHandles(t *testing.T) {
	dir := t.TempDir()
	fencetest.TwoHandles(t, open(t, dir), open(t, dir))
}

// TestTwoHandlesSticky: the same with shared locks that are never let go
// for idleness, so each handle's raises get through only because the other
// probes for them and yields.
func TestTwoHandlesSticky(t *testing.T) {
	dir := t.TempDir()
	o := dirfence.Options{Linger: time.Hour}
	fencetest.TwoHandles(t, openWith(t, dir, o), openWith(t, dir, o))
}

func TestCorruptFile(t *testing.T) {
	dir := t.TempDir()
	d := open(t, dir)
	ctx := context.Background()
	if err := d.Admit(ctx, "r", ep(3, "a")); err != nil {
		t.Fatal(err)
	}
	path := fenceFile(t, dir)
	if err := os.WriteFile(path+".new", []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	if err := d.Admit(ctx, "r", ep(4, "a")); err == nil {
		t.Fatal("a corrupt fence file was silently accepted")
	}
}

// TestTornRaise: a raise rewrites one slot in place; a crash that tears
// that write leaves the other slot, the previous durable highest, to be read.
// Raises after the first keep the same inode (no rename).
func TestTornRaise(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	d := open(t, dir)
	for term := uint64(3); term <= 4; term++ {
		if err := d.Admit(ctx, "r", ep(term, "a")); err != nil {
			t.Fatal(err)
		}
	}
	path := fenceFile(t, dir)
	st1, _ := os.Stat(path)
	if err := d.Admit(ctx, "r", ep(5, "a")); err != nil {
		t.Fatal(err)
	}
	st2, _ := os.Stat(path)
	if !os.SameFile(st1, st2) {
		t.Fatal("a raise after the first replaced the fence file")
	}
	d.Close()
	// Term 5 sits in slot 0 (3: slot 0, 4: slot 1, 5: slot 0). Tear it as a
	// crash in the middle of writing it would: keep its first bytes, lose the
	// rest.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, 300)
	for i := range junk {
		junk[i] = 0xa5
	}
	if _, err := f.WriteAt(junk, 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	d2 := open(t, dir)
	if h, err := d2.Highest(ctx, "r"); err != nil || h != ep(4, "a") {
		t.Fatalf("Highest after a torn raise = %v, %v; want the previous record %v", h, err, ep(4, "a"))
	}
	if err := d2.Admit(ctx, "r", ep(3, "a")); err == nil {
		t.Fatal("term 3 admitted after a torn raise to 5 (highest durable: 4)")
	}
	if err := d2.Admit(ctx, "r", ep(6, "a")); err != nil {
		t.Fatal(err)
	}
	d2.Close()
	if h, err := open(t, dir).Highest(ctx, "r"); err != nil || h != ep(6, "a") {
		t.Fatalf("Highest after reopen = %v, %v; want %v", h, err, ep(6, "a"))
	}
}

// TestStableBeforeUse: every raise is on stable storage (the slot written
// and fdatasynced; a resource's first file written, fsynced, renamed into
// place and the directory fsynced) before the write runs or Admit returns,
// on the child's real system calls. Intent files only hold locks.
func TestStableBeforeUse(t *testing.T) {
	fencetest.StableBeforeUse(t, durable, func(path string) bool { return strings.HasSuffix(path, ".intent") })
}
