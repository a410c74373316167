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
	minSize   int64              // the smallest size since it was last synced (a truncate on the way)

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
		n.minSize = min(n.minSize, size)
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
	n.minSize = int64(len(n.data))
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
	n.minSize = int64(len(n.data))
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
//
// Each directory's entries on disk are its own: a rename whose destination
// directory was synced and whose source was not leaves the inode named in
// both on disk. A regular file then has both names after the cut (as two
// files with the same contents: the model has no hard links; an old name
// coming back is what a filesystem without a journal does). A directory
// can have one place in a tree: it is kept where its directory names it
// now (the synced destination), or, if neither does, at the first name in
// order.
func (m *model) cut(torn bool, rng *rand.Rand, st *CutStats) *model {
	nm := &model{nextIno: m.nextIno}

	// Pass 1: the entries on disk of every directory reachable from the
	// root, and every place on disk that names each inode.
	type place struct {
		dir  *inode
		name string
	}
	ents := map[*inode]map[string]*inode{}
	places := map[*inode][]place{}
	var plan func(n *inode)
	plan = func(n *inode) {
		entries := diskEntries(n, torn, rng, st)
		ents[n] = entries
		for _, k := range sortedNames(entries) { // the same rng draws for the same state
			v := entries[k]
			places[v] = append(places[v], place{n, k})
			if _, done := ents[v]; v.isDir() && !done {
				plan(v)
			}
		}
	}
	plan(m.root)
	home := map[*inode]place{}
	for v, ps := range places {
		if !v.isDir() {
			continue
		}
		home[v] = ps[0]
		for _, p := range ps {
			if p.dir.kids[p.name] == v {
				home[v] = p
				break
			}
		}
	}

	// Pass 2: the new tree.
	files := map[*inode]*inode{}
	built := map[*inode]bool{}
	var build func(n *inode) *inode
	build = func(n *inode) *inode {
		built[n] = true
		c := &inode{ino: n.ino, mode: n.mode, mtime: n.mtime, nlink: 1,
			kids: map[string]*inode{}, dkids: map[string]*inode{}}
		entries := ents[n]
		for _, k := range sortedNames(entries) {
			v := entries[k]
			var cv *inode
			switch {
			case v.isDir():
				if home[v] != (place{n, k}) || built[v] {
					continue
				}
				cv = build(v)
			case files[v] == nil:
				cv = cloneFile(v, torn, rng, st)
				files[v] = cv
			default:
				// A second name of the same file: a copy of its own.
				f := files[v]
				cv = &inode{ino: nm.nextIno, mode: f.mode, mtime: f.mtime, nlink: 1,
					data: append([]byte(nil), f.data...), ddata: append([]byte(nil), f.ddata...),
					dirty: map[int64]struct{}{}, minSize: f.minSize}
				nm.nextIno++
			}
			c.kids[k], c.dkids[k] = cv, cv
		}
		return c
	}
	nm.root = build(m.root)
	return nm
}

// cloneFile is a regular file as the cut leaves it (tornFile with torn).
func cloneFile(n *inode, torn bool, rng *rand.Rand, st *CutStats) *inode {
	c := &inode{ino: n.ino, mode: n.mode, mtime: n.mtime, nlink: 1}
	disk := append([]byte(nil), n.ddata...)
	changed := len(n.dirty) > 0 || n.sizeDirty
	if changed {
		st.LostFiles++
	}
	if torn && changed {
		var kept int
		disk, kept = tornFile(n, disk, rng)
		if kept > 0 {
			st.TornFiles++
		}
	}
	c.data, c.ddata, c.dirty = disk, append([]byte(nil), disk...), map[int64]struct{}{}
	c.minSize = int64(len(disk))
	return c
}

// diskEntries is what a cut leaves of directory n's entries: those on
// disk, and with torn each unsynced change of an entry at random.
func diskEntries(n *inode, torn bool, rng *rand.Rand, st *CutStats) map[string]*inode {
	entries := n.dkids
	if !n.dirDirty && sameEntries(n.kids, n.dkids) {
		return entries
	}
	names := map[string]bool{}
	for k := range n.kids {
		names[k] = true
	}
	for k := range n.dkids {
		names[k] = true
	}
	changed := make([]string, 0, len(names))
	for k := range names {
		if n.kids[k] != n.dkids[k] {
			changed = append(changed, k)
		}
	}
	sort.Strings(changed)
	st.LostEntries += len(changed)
	if !torn || len(changed) == 0 {
		return entries
	}
	entries = make(map[string]*inode, len(n.dkids))
	for k, v := range n.dkids {
		entries[k] = v
	}
	for _, k := range changed {
		if rng.IntN(2) == 0 {
			st.KeptEntries++
			if v := n.kids[k]; v != nil {
				entries[k] = v
			} else {
				delete(entries, k)
			}
		}
	}
	return entries
}

func sortedNames(m map[string]*inode) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// tornFile is what a torn cut leaves of a file whose data or size
// changed since its last sync, from disk (a copy of what is on disk): each
// unsynced block survives or not, and an unsynced size change is lost,
// kept, or kept only as far as its truncation (the smallest size since
// the last sync: a file truncated and written again, the "zero-length
// file after a crash" of delayed allocation). A truncation that reached
// the disk frees the old blocks: what it cut off reads back as zeros
// unless the new data's block reached the disk too. Blocks past the size
// on disk are invisible. It returns the data and how many changes
// survived.
func tornFile(n *inode, disk []byte, rng *rand.Rand) ([]byte, int) {
	kept := 0
	if n.sizeDirty {
		switch rng.IntN(3) {
		case 0: // the size change lost
		case 1: // every size change reached the disk
			disk = disk[:min(int64(len(disk)), n.minSize)]
			disk = append(disk, make([]byte, int64(len(n.data))-int64(len(disk)))...)
			kept++
		case 2: // only the truncation did
			disk = disk[:min(int64(len(disk)), n.minSize)]
			kept++
		}
	}
	blocks := make([]int64, 0, len(n.dirty))
	for b := range n.dirty {
		blocks = append(blocks, b)
	}
	sort.Slice(blocks, func(i, j int) bool { return blocks[i] < blocks[j] })
	for _, b := range blocks {
		if rng.IntN(2) != 0 {
			continue
		}
		lo := b * blockSize
		hi := min(lo+blockSize, int64(len(n.data)), int64(len(disk)))
		if lo < hi {
			copy(disk[lo:hi], n.data[lo:hi])
			kept++
		}
	}
	return disk, kept
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
