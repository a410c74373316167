package powerfs

import (
	"bytes"
	"math/rand/v2"
	"syscall"
	"testing"
)

// The model as strict as a real disk: a rename whose destination alone
// was synced, and size changes torn at a cut.

func newDir(m *model, parent *inode, name string) *inode {
	d := m.newInode(syscall.S_IFDIR | 0o755)
	parent.kids[name] = d
	parent.dirDirty = true
	return d
}

// rename moves name from one directory to another, as the FUSE node does.
func rename(from *inode, name string, to *inode, newName string) {
	v := from.kids[name]
	delete(from.kids, name)
	from.dirDirty = true
	to.kids[newName] = v
	to.dirDirty = true
}

// TestModelRenameDestinationSyncedKeepsIt: a file renamed from directory a
// into directory b, with only b synced, is at its new name after a cut:
// fsync(2) of b made that entry durable. The source's removal was not
// synced, so the old name is back too. The model used to keep whichever
// name sorted first ("a/f") and lose the synced one.
func TestModelRenameDestinationSyncedKeepsIt(t *testing.T) {
	m := newModel()
	a, b := newDir(m, m.root, "a"), newDir(m, m.root, "b")
	f := newFile(m, a, "f")
	f.write([]byte("data"), 0)
	f.syncFile()
	a.syncDir()
	b.syncDir()
	m.root.syncDir()
	rename(a, "f", b, "f")
	b.syncDir()
	c := cutOf(m).root
	nb := c.kids["b"].kids["f"]
	if nb == nil || string(nb.data) != "data" {
		t.Fatalf("after the cut b/f is %v: the synced destination of a rename was lost", nb)
	}
	na := c.kids["a"].kids["f"]
	if na == nil || string(na.data) != "data" {
		t.Fatalf("after the cut a/f is %v: the unsynced removal of the old name survived", na)
	}
	if na == nb || na.ino == nb.ino {
		t.Fatal("the two names of the file share one inode: the model has no hard links, each must be a file of its own")
	}
	// Once a is synced too, only the new name is left.
	a.syncDir()
	c = cutOf(m).root
	if c.kids["a"].kids["f"] != nil || c.kids["b"].kids["f"] == nil {
		t.Fatalf("rename with both directories synced: a/f %v, b/f %v; want only b/f", c.kids["a"].kids["f"], c.kids["b"].kids["f"])
	}
}

// TestModelRenameDirectoryKeepsSyncedPlace: a directory renamed from a
// into b, with only b synced, is on disk in both; a tree has one place
// for it, and the cut keeps the synced one, b/d, with its contents.
func TestModelRenameDirectoryKeepsSyncedPlace(t *testing.T) {
	m := newModel()
	a, b := newDir(m, m.root, "a"), newDir(m, m.root, "b")
	d := newDir(m, a, "d")
	f := newFile(m, d, "f")
	f.write([]byte("inside"), 0)
	f.syncFile()
	d.syncDir()
	a.syncDir()
	b.syncDir()
	m.root.syncDir()
	rename(a, "d", b, "d")
	b.syncDir()
	c := cutOf(m).root
	nd := c.kids["b"].kids["d"]
	if nd == nil || nd.kids["f"] == nil || string(nd.kids["f"].data) != "inside" {
		t.Fatalf("after the cut b/d is %v: the synced destination of a directory's rename was lost", nd)
	}
	if c.kids["a"].kids["d"] != nil {
		t.Fatal("the directory is in two places after the cut")
	}
}

// TestModelTornTruncateCanReachZero: a file truncated and written again
// without a sync (O_TRUNC, then the new contents: the pattern behind the
// zero-length files of delayed allocation) may come back from a torn cut
// empty — the truncation on disk, the new data not — besides old whole
// and new. Every outcome is one of the states the disk could be in: never
// old data under the new size. The model used to keep the old size or the
// new one, never the truncation.
func TestModelTornTruncateCanReachZero(t *testing.T) {
	old := bytes.Repeat([]byte{'A'}, 4*blockSize)
	neu := bytes.Repeat([]byte{'B'}, 100)
	seen := map[string]bool{}
	for seed := uint64(0); seed < 64; seed++ {
		m := newModel()
		f := newFile(m, m.root, "f")
		f.write(old, 0)
		f.syncFile()
		m.root.syncDir()
		f.resize(0)
		f.write(neu, 0)
		var st CutStats
		got := m.cut(true, rand.New(rand.NewPCG(seed, 1)), &st).root.kids["f"].data
		switch {
		case bytes.Equal(got, old):
			seen["old"] = true
		case len(got) == 0:
			seen["empty"] = true
		case bytes.Equal(got, neu):
			seen["new"] = true
		case bytes.Equal(got, make([]byte, len(neu))):
			seen["new size, zeros"] = true
		default:
			if bytes.Contains(got, []byte{'A'}) && len(got) != len(old) {
				t.Fatalf("seed %d: %d bytes after the cut hold old data under the new size", seed, len(got))
			}
			seen["old, some blocks new"] = true
		}
	}
	for _, want := range []string{"old", "empty", "new", "new size, zeros"} {
		if !seen[want] {
			t.Errorf("in 64 torn cuts the outcome %q never came (saw %v)", want, seen)
		}
	}
}

// TestModelTornExtendNeverShowsPastSize: data written past the end of a
// file, with its size change lost at a torn cut, is not on disk: a block
// beyond the size on disk is invisible.
func TestModelTornExtendNeverShowsPastSize(t *testing.T) {
	for seed := uint64(0); seed < 32; seed++ {
		m := newModel()
		f := newFile(m, m.root, "f")
		f.write([]byte("head"), 0)
		f.syncFile()
		m.root.syncDir()
		f.write(bytes.Repeat([]byte{'X'}, 2*blockSize), blockSize)
		var st CutStats
		got := m.cut(true, rand.New(rand.NewPCG(seed, 2)), &st).root.kids["f"].data
		if len(got) != 4 && len(got) != 3*blockSize {
			t.Fatalf("seed %d: size %d after the cut, want the old 4 or the new %d", seed, len(got), 3*blockSize)
		}
	}
}
