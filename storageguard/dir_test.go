//go:build unix

package storageguard_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/termfence/termfence/storageguard"
)

func openDir(t *testing.T, dir string) *storageguard.Dir {
	t.Helper()
	d, err := storageguard.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestDir(t *testing.T) {
	var dir string
	testFence(t, fenceKind{
		open: func(t *testing.T) storageguard.Fence {
			dir = t.TempDir()
			return openDir(t, dir)
		},
		reopen:     func(t *testing.T) storageguard.Fence { return openDir(t, dir) },
		goroutines: 16, ops: 300,
	})
}

// TestDirNamesStayInside: every resource name, however hostile, maps to a
// file directly inside the fence directory.
func TestDirNamesStayInside(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "fence")
	d := openDir(t, dir)
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
	inside, _ := os.ReadDir(dir)
	if len(inside) != len(names) {
		var got []string
		for _, e := range inside {
			got = append(got, e.Name())
		}
		t.Fatalf("fence dir holds %d files, want %d: %v", len(inside), len(names), got)
	}
}

// TestDirTwoHandles: two Dir values on one directory behave like two
// processes (flock locks open file descriptions, not processes).
func TestDirTwoHandles(t *testing.T) {
	dir := t.TempDir()
	testFenceTwoHandles(t, openDir(t, dir), openDir(t, dir))
}

func TestDirCorruptFile(t *testing.T) {
	dir := t.TempDir()
	d := openDir(t, dir)
	ctx := context.Background()
	if err := d.Admit(ctx, "r", ep(3, "a")); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.fence"))
	if len(files) != 1 {
		t.Fatalf("fence files: %v", files)
	}
	if err := os.WriteFile(files[0]+".new", []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(files[0]+".new", files[0]); err != nil {
		t.Fatal(err)
	}
	if err := d.Admit(ctx, "r", ep(4, "a")); err == nil {
		t.Fatal("a corrupt fence file was silently accepted")
	}
}
