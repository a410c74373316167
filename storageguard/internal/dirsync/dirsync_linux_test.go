package dirsync_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/termfence/termfence/storageguard/fencetest/powerfs"
	"github.com/termfence/termfence/storageguard/internal/dirsync"
)

// TestPathSurvivesCut: a synced file in directories made unsynced, some
// before and some after, is there after a power cut once Path synced its
// directory; without Path it is not (the control: the disk really loses
// what was not synced).
func TestPathSurvivesCut(t *testing.T) {
	disk := powerfs.MountTest(t, powerfs.Options{})
	write := func(rel string) string {
		t.Helper()
		p := filepath.Join(disk.Dir(), rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString("raise"); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if err := os.MkdirAll(filepath.Join(disk.Dir(), "made"), 0o755); err != nil {
		t.Fatal(err)
	}
	synced := write("made/a/b/fence")
	if err := dirsync.Path(filepath.Dir(synced)); err != nil {
		t.Fatal(err)
	}
	control := write("other/c/fence")
	if err := disk.PowerCut(false); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(synced); err != nil || string(b) != "raise" {
		t.Fatalf("after the cut %s holds %q, %v: want \"raise\"", synced, b, err)
	}
	if _, err := os.Stat(control); !os.IsNotExist(err) {
		t.Fatalf("control: %s, never Path-synced, survived the cut (%v): the disk keeps unsynced names", control, err)
	}
}
