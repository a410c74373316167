package powerfs

import (
	"math/rand/v2"
	"sort"
	"syscall"
	"time"
)

// blockSize is the unit in which a write that was never synced survives a
// cut in part (CutOptions.Torn) and in which a failed sync keeps or loses
// data: a disk sector.
const blockSize = 512

// inode is one file or directory of the model. It holds two states: what
// the programs on the mount see (data, kids), and what is on the "disk"
// (ddata, dkids), which is all that survives a cut.
type inode struct {
	ino   uint64
	mode  uint32 // S_IFREG or S_IFDIR, and the permission bits
	mtime time.Time
	nlink uint32 // names that reach it now (0: unlinked, perhaps still open)

	// Regular files.
	data      []byte             // what readers see
	ddata     []byte             // on disk
	dirty     map[int64]struct{} // blocks written since they were last synced
	sizeDirty bool               // the size changed since it was last synced

	// Directories.
	kids     map[string]*inode // entries readers see
	dkids    map[string]*inode // entries on disk
	dirDirty bool
}

func (n *inode) isDir() bool { return n.mode&syscall.S_IFMT == syscall.S_IFDIR }

// model is the whole filesystem: one mutex guards every inode.
type model struct {
	root    *inode
	nextIno uint64
	dead    bool // cut: every operation fails with EIO
}

func newModel() *model {
	m := &model{nextIno: 2}
	m.root = &inode{ino: 1, mode: syscall.S_IFDIR | 0o755, mtime: time.Now(), nlink: 1,
		kids: map[string]*inode{}, dkids: map[string]*inode{}}
	return m
}

func (m *model) newInode(mode uint32) *inode {
	n := &inode{ino: m.nextIno, mode: mode, mtime: time.Now(), nlink: 1}
	m.nextIno++
	if n.isDir() {
		n.kids, n.dkids = map[string]*inode{}, map[string]*inode{}
	} else {
		n.dirty = map[int64]struct{}{}
	}
	return n
}

// write writes p at off into n's data, as a write(2) that the page cache
// keeps: nothing reaches the disk until a sync.
func (n *inode) write(p []byte, off int64) {
	end := off + int64(len(p))
	if end > int64(len(n.data)) {
		n.resize(end)
	}
	copy(n.data[off:], p)
	for b := off / blockSize; b*blockSize < end; b++ {
		n.dirty[b] = struct{}{}
	}
	n.mtime = time.Now()
}

// resize truncates or extends n's data (with zeros).
func (n *inode) resize(size int64) {
	old := int64(len(n.data))
	if size == old {
		return
	}
	if size < old {
		n.data = n.data[:size]
		for b := range n.dirty {
			if b*blockSize >= size {
				delete(n.dirty, b)
			}
		}
		if size%blockSize != 0 {
			n.dirty[size/blockSize] = struct{}{}
		}
	} else {
		nd := make([]byte, size)
		copy(nd, n.data)
		n.data = nd
		for b := old / blockSize; b*blockSize < size; b++ {
			n.dirty[b] = struct{}{}
		}
	}
	n.sizeDirty = true
	n.mtime = time.Now()
}

// persistBlock copies block b of the data to the disk.
func (n *inode) persistBlock(b int64) {
	lo := b * blockSize
	if lo >= int64(len(n.data)) {
		return
	}
	hi := min(lo+blockSize, int64(len(n.data)))
	if int64(len(n.ddata)) < hi {
		nd := make([]byte, hi)
		copy(nd, n.ddata)
		n.ddata = nd
	}
	copy(n.ddata[lo:hi], n.data[lo:hi])
}

// persistSize makes the disk's size the data's size.
func (n *inode) persistSize() {
	size := int64(len(n.data))
	switch {
	case int64(len(n.ddata)) > size:
		n.ddata = n.ddata[:size]
	case int64(len(n.ddata)) < size:
		nd := make([]byte, size)
		copy(nd, n.ddata)
		n.ddata = nd
	}
}

// syncFile is a successful fsync or fdatasync of a regular file: its dirty
// blocks and its size reach the disk. Blocks that a failed sync marked
// clean without writing are not written now (Linux since 4.13 behaves so:
// a later fsync reports success and does not retry them).
func (n *inode) syncFile() {
	for b := range n.dirty {
		n.persistBlock(b)
	}
	clear(n.dirty)
	if n.sizeDirty {
		n.persistSize()
		n.sizeDirty = false
	}
}

// failSync is an fsync that fails with EIO: each dirty block reaches the
// disk or not, at random, and all are marked clean, so the data stays
// readable while a later sync no longer writes it (the "fsyncgate" case).
func (n *inode) failSync(rng *rand.Rand) {
	for b := range n.dirty {
		if rng.IntN(2) == 0 {
			n.persistBlock(b)
		}
	}
	clear(n.dirty)
	if n.sizeDirty && rng.IntN(2) == 0 {
		n.persistSize()
	}
	n.sizeDirty = false
}

// syncDir is an fsync of a directory: its entries as they are now reach
// the disk.
func (n *inode) syncDir() {
	n.dkids = make(map[string]*inode, len(n.kids))
	for k, v := range n.kids {
		n.dkids[k] = v
	}
	n.dirDirty = false
}

// CutStats counts what a cut did.
type CutStats struct {
	Killed      int // processes ended
	LostFiles   int // regular files whose data (or size) differed from the disk
	TornFiles   int // of those, files of which some unsynced blocks survived
	LostEntries int // directory entries whose change was not synced
	KeptEntries int // of those, changes that survived (Torn only)
}

// cut returns the model as the disk holds it: every inode reachable from
// the root through the entries on disk, with its data on disk. With torn
// set, each unsynced block, size change and entry change survives or not
// at random instead of always being lost.
func (m *model) cut(torn bool, rng *rand.Rand, st *CutStats) *model {
	nm := &model{nextIno: m.nextIno}
	seen := map[*inode]*inode{}
	var clone func(n *inode) *inode
	clone = func(n *inode) *inode {
		if c, ok := seen[n]; ok {
			return c
		}
		c := &inode{ino: n.ino, mode: n.mode, mtime: n.mtime, nlink: 1}
		seen[n] = c
		if !n.isDir() {
			disk := append([]byte(nil), n.ddata...)
			changed := len(n.dirty) > 0 || n.sizeDirty
			if changed {
				st.LostFiles++
			}
			if torn && changed {
				tn := &inode{data: n.data, ddata: disk}
				kept := 0
				blocks := make([]int64, 0, len(n.dirty))
				for b := range n.dirty {
					blocks = append(blocks, b)
				}
				sort.Slice(blocks, func(i, j int) bool { return blocks[i] < blocks[j] })
				for _, b := range blocks {
					if rng.IntN(2) == 0 {
						tn.persistBlock(b)
						kept++
					}
				}
				if n.sizeDirty && rng.IntN(2) == 0 {
					tn.persistSize()
					kept++
				}
				disk = tn.ddata
				if kept > 0 {
					st.TornFiles++
				}
			}
			c.data, c.ddata, c.dirty = disk, append([]byte(nil), disk...), map[int64]struct{}{}
			return c
		}
		entries := n.dkids
		if n.dirDirty || !sameEntries(n.kids, n.dkids) {
			names := map[string]bool{}
			for k := range n.kids {
				names[k] = true
			}
			for k := range n.dkids {
				names[k] = true
			}
			sorted := make([]string, 0, len(names))
			for k := range names {
				if n.kids[k] != n.dkids[k] {
					sorted = append(sorted, k)
				}
			}
			sort.Strings(sorted)
			st.LostEntries += len(sorted)
			if torn && len(sorted) > 0 {
				entries = make(map[string]*inode, len(n.dkids))
				for k, v := range n.dkids {
					entries[k] = v
				}
				for _, k := range sorted {
					if rng.IntN(2) == 0 {
						st.KeptEntries++
						if v := n.kids[k]; v != nil {
							entries[k] = v
						} else {
							delete(entries, k)
						}
					}
				}
			}
		}
		c.kids, c.dkids = map[string]*inode{}, map[string]*inode{}
		names := make([]string, 0, len(entries))
		for k := range entries {
			names = append(names, k)
		}
		sort.Strings(names) // the same rng draws for the same state
		for _, k := range names {
			v := entries[k]
			if _, again := seen[v]; again {
				// Reached twice (two unsynced renames can leave a directory
				// in two places on disk): a tree has no hard links, keep the
				// first.
				continue
			}
			cv := clone(v)
			c.kids[k], c.dkids[k] = cv, cv
		}
		return c
	}
	nm.root = clone(m.root)
	return nm
}

func sameEntries(a, b map[string]*inode) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
