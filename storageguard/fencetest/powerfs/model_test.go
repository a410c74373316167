package powerfs

import (
	"bytes"
	"math/rand/v2"
	"syscall"
	"testing"
)

// The model alone, without FUSE: what survives a cut.

func newFile(m *model, dir *inode, name string) *inode {
	f := m.newInode(syscall.S_IFREG | 0o644)
	dir.kids[name] = f
	dir.dirDirty = true
	return f
}

func cutOf(m *model) *model {
	var st CutStats
	return m.cut(false, rand.New(rand.NewPCG(1, 2)), &st)
}

func TestModelWriteThenCutLosesIt(t *testing.T) {
	m := newModel()
	f := newFile(m, m.root, "f")
	m.root.syncDir()
	f.write([]byte("synced"), 0)
	f.syncFile()
	f.write([]byte("SYNCED, and more"), 0)
	c := cutOf(m).root.kids["f"]
	if c == nil || string(c.data) != "synced" {
		t.Fatalf("after the cut the file holds %q, want the synced %q", c.data, "synced")
	}
}

func TestModelFsyncThenCutKeepsIt(t *testing.T) {
	m := newModel()
	f := newFile(m, m.root, "f")
	f.write([]byte("data"), 0)
	f.syncFile()
	m.root.syncDir()
	if c := cutOf(m).root.kids["f"]; c == nil || string(c.data) != "data" {
		t.Fatalf("synced file after the cut: %v", c)
	}
}

func TestModelNewFileNeedsItsDirectorySynced(t *testing.T) {
	m := newModel()
	f := newFile(m, m.root, "f")
	f.write([]byte("data"), 0)
	f.syncFile() // the data, not the name
	if c := cutOf(m).root.kids["f"]; c != nil {
		t.Fatalf("a file whose directory was never synced survived the cut: %q", c.data)
	}
}

func TestModelRenameWithoutDirSyncIsUndone(t *testing.T) {
	m := newModel()
	a := newFile(m, m.root, "a")
	a.write([]byte("old"), 0)
	a.syncFile()
	tmp := newFile(m, m.root, "tmp")
	tmp.write([]byte("new"), 0)
	tmp.syncFile()
	m.root.syncDir()
	// rename tmp over a, no directory sync
	delete(m.root.kids, "tmp")
	m.root.kids["a"] = tmp
	m.root.dirDirty = true
	c := cutOf(m).root
	if string(c.kids["a"].data) != "old" || c.kids["tmp"] == nil {
		t.Fatalf("an unsynced rename survived: a=%q tmp=%v", c.kids["a"].data, c.kids["tmp"])
	}
	m.root.syncDir()
	c = cutOf(m).root
	if string(c.kids["a"].data) != "new" || c.kids["tmp"] != nil {
		t.Fatalf("a synced rename was lost: a=%q tmp=%v", c.kids["a"].data, c.kids["tmp"])
	}
}

func TestModelUnlinkWithoutDirSyncComesBack(t *testing.T) {
	m := newModel()
	f := newFile(m, m.root, "f")
	f.write([]byte("x"), 0)
	f.syncFile()
	m.root.syncDir()
	delete(m.root.kids, "f")
	f.nlink--
	if c := cutOf(m).root.kids["f"]; c == nil || string(c.data) != "x" {
		t.Fatalf("an unsynced unlink was kept: %v", c)
	}
}

func TestModelTruncateWithoutSyncIsUndone(t *testing.T) {
	m := newModel()
	f := newFile(m, m.root, "f")
	f.write([]byte("0123456789"), 0)
	f.syncFile()
	m.root.syncDir()
	f.resize(3)
	if c := cutOf(m).root.kids["f"]; string(c.data) != "0123456789" {
		t.Fatalf("unsynced truncate survived: %q", c.data)
	}
	f.syncFile()
	if c := cutOf(m).root.kids["f"]; string(c.data) != "012" {
		t.Fatalf("synced truncate lost: %q", c.data)
	}
}

func TestModelTornCutKeepsSomeBlocks(t *testing.T) {
	m := newModel()
	f := newFile(m, m.root, "f")
	f.write(make([]byte, 64*blockSize), 0)
	f.syncFile()
	m.root.syncDir()
	f.write(bytes.Repeat([]byte{1}, 64*blockSize), 0)
	var st CutStats
	c := m.cut(true, rand.New(rand.NewPCG(3, 4)), &st).root.kids["f"]
	ones := 0
	for b := 0; b < 64; b++ {
		blk := c.data[b*blockSize : (b+1)*blockSize]
		switch {
		case bytes.Equal(blk, bytes.Repeat([]byte{1}, blockSize)):
			ones++
		case bytes.Equal(blk, make([]byte, blockSize)):
		default:
			t.Fatalf("block %d is neither old nor new", b)
		}
	}
	if ones == 0 || ones == 64 || st.TornFiles != 1 {
		t.Fatalf("a torn cut kept %d of 64 unsynced blocks (stats %+v), want some but not all", ones, st)
	}
}

func TestModelFailedSyncMarksClean(t *testing.T) {
	// Over many seeds: a failed sync keeps each block or not; a later
	// successful sync never writes what the failed one dropped.
	lostOnce := false
	for seed := uint64(0); seed < 32; seed++ {
		m := newModel()
		f := newFile(m, m.root, "f")
		f.write(make([]byte, blockSize), 0)
		f.syncFile()
		m.root.syncDir()
		f.write(bytes.Repeat([]byte{7}, blockSize), 0)
		f.failSync(rand.New(rand.NewPCG(seed, 0)))
		if f.data[0] != 7 {
			t.Fatal("the data must stay readable after a failed sync")
		}
		f.syncFile()
		c := cutOf(m).root.kids["f"]
		if c.data[0] != 7 {
			lostOnce = true
		}
	}
	if !lostOnce {
		t.Fatal("in 32 failed syncs, a later successful sync always saved the data: the fsyncgate case is not modelled")
	}
}
