//go:build linux

package dirfence_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/termfence/termfence/storageguard/dirfence"
	"github.com/termfence/termfence/storageguard/fencetest/powerfs"
)

// TestOpenSyncsExistingDirEntry: a fence directory that already exists
// need not be durable — another process may have just created it and not
// yet synced its parent, or its sync of the parent failed (the Open that
// made it returned the error). A raise acknowledged through a later Open
// must survive a power cut all the same: Open syncs the directory's entry
// in its parent even when it did not create the directory. (The old Open
// synced the parent only for directories it created itself; TestDirPowerLoss
// lost every raise of its first round when the first Open's sync failed.)
func TestOpenSyncsExistingDirEntry(t *testing.T) {
	disk := powerfs.MountTest(t, powerfs.Options{})
	for _, depth := range []int{1, 2} {
		rel := "fence" + string(rune('0'+depth))
		if depth == 2 {
			rel = filepath.Join("outer", rel)
		}
		dir := filepath.Join(disk.Dir(), rel)
		// "Another process" made the directories and has not synced them.
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		f, err := dirfence.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Admit(context.Background(), "r", ep(7, "n1")); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := disk.PowerCut(false); err != nil {
			t.Fatal(err)
		}
		f, err = dirfence.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		h, err := f.Highest(context.Background(), "r")
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if h.Term != 7 {
			t.Fatalf("%s: raise to 7 acknowledged, highest after the cut is %d: the directory's entry was never synced", rel, h.Term)
		}
	}
}
