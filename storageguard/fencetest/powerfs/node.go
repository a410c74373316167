package powerfs

import (
	"context"
	"sort"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// node is the FUSE face of one inode of one mount's model.
type node struct {
	fs.Inode
	d  *Disk
	m  *model // the model this mount serves; dead after a cut
	in *inode
}

var (
	_ fs.NodeLookuper   = (*node)(nil)
	_ fs.NodeGetattrer  = (*node)(nil)
	_ fs.NodeSetattrer  = (*node)(nil)
	_ fs.NodeOpener     = (*node)(nil)
	_ fs.NodeReader     = (*node)(nil)
	_ fs.NodeWriter     = (*node)(nil)
	_ fs.NodeFsyncer    = (*node)(nil)
	_ fs.NodeFlusher    = (*node)(nil)
	_ fs.NodeCreater    = (*node)(nil)
	_ fs.NodeMkdirer    = (*node)(nil)
	_ fs.NodeUnlinker   = (*node)(nil)
	_ fs.NodeRmdirer    = (*node)(nil)
	_ fs.NodeRenamer    = (*node)(nil)
	_ fs.NodeReaddirer  = (*node)(nil)
	_ fs.NodeAllocater  = (*node)(nil)
	_ fs.NodeStatfser   = (*node)(nil)
	_ fs.NodeOpendirer  = (*node)(nil)
	_ fs.NodeReleaser   = (*node)(nil)
	_ fs.NodeAccesser   = (*node)(nil)
	_ fs.NodeGetxattrer = (*node)(nil)
)

// lock takes the model's lock; ok is false (and the lock not held) once
// the mount's model is dead.
func (n *node) lock() bool {
	n.d.mu.Lock()
	if n.m.dead {
		n.d.mu.Unlock()
		return false
	}
	return true
}

func (n *node) unlock() { n.d.mu.Unlock() }

func (n *node) child(ctx context.Context, c *inode, out *fuse.EntryOut) *fs.Inode {
	fillAttr(c, &out.Attr)
	return n.NewInode(ctx, &node{d: n.d, m: n.m, in: c}, fs.StableAttr{Mode: c.mode & syscall.S_IFMT, Ino: c.ino})
}

func fillAttr(c *inode, a *fuse.Attr) {
	a.Ino = c.ino
	a.Mode = c.mode
	a.Nlink = c.nlink
	if c.isDir() {
		a.Nlink = 2
		a.Size = 4096
	} else {
		a.Size = uint64(len(c.data))
	}
	a.Blocks = (a.Size + 511) / 512
	a.Blksize = 4096
	a.SetTimes(&c.mtime, &c.mtime, &c.mtime)
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if !n.lock() {
		return nil, syscall.EIO
	}
	defer n.unlock()
	c, ok := n.in.kids[name]
	if !ok {
		return nil, syscall.ENOENT
	}
	return n.child(ctx, c, out), 0
}

func (n *node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if !n.lock() {
		return syscall.EIO
	}
	defer n.unlock()
	fillAttr(n.in, &out.Attr)
	return 0
}

func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if !n.lock() {
		return syscall.EIO
	}
	defer n.unlock()
	if size, ok := in.GetSize(); ok {
		if n.in.isDir() {
			return syscall.EISDIR
		}
		n.in.resize(int64(size))
	}
	if mode, ok := in.GetMode(); ok {
		n.in.mode = n.in.mode&syscall.S_IFMT | mode&0o7777
	}
	if mt, ok := in.GetMTime(); ok {
		n.in.mtime = mt
	}
	fillAttr(n.in, &out.Attr)
	return 0
}

func (n *node) Access(ctx context.Context, mask uint32) syscall.Errno {
	if !n.lock() {
		return syscall.EIO
	}
	n.unlock()
	return 0
}

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	return 0, syscall.ENODATA
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if !n.lock() {
		return nil, 0, syscall.EIO
	}
	defer n.unlock()
	if flags&syscall.O_TRUNC != 0 && !n.in.isDir() {
		n.in.resize(0)
	}
	return nil, 0, 0
}

func (n *node) Opendir(ctx context.Context) syscall.Errno {
	if !n.lock() {
		return syscall.EIO
	}
	n.unlock()
	return 0
}

func (n *node) Release(ctx context.Context, fh fs.FileHandle) syscall.Errno { return 0 }

func (n *node) Flush(ctx context.Context, fh fs.FileHandle) syscall.Errno {
	if !n.lock() {
		return syscall.EIO
	}
	n.unlock()
	return 0
}

func (n *node) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if !n.lock() {
		return nil, syscall.EIO
	}
	defer n.unlock()
	if off >= int64(len(n.in.data)) {
		return fuse.ReadResultData(nil), 0
	}
	k := copy(dest, n.in.data[off:])
	return fuse.ReadResultData(dest[:k]), 0
}

func (n *node) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if !n.lock() {
		return 0, syscall.EIO
	}
	defer n.unlock()
	n.in.write(data, off)
	return uint32(len(data)), 0
}

func (n *node) Allocate(ctx context.Context, fh fs.FileHandle, off, size uint64, mode uint32) syscall.Errno {
	if mode != 0 {
		return syscall.EOPNOTSUPP
	}
	if !n.lock() {
		return syscall.EIO
	}
	defer n.unlock()
	if end := int64(off + size); end > int64(len(n.in.data)) {
		n.in.resize(end)
	}
	return 0
}

// Fsync is fsync(2) and fdatasync(2) of a file, and fsync(2) of a
// directory: the only way anything reaches the disk.
func (n *node) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	if delay := n.d.syncDelay(); delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return syscall.EINTR
		}
	}
	if !n.lock() {
		return syscall.EIO
	}
	defer n.unlock()
	n.d.stats.Syncs++
	if n.d.takeFailure(n.in) {
		n.d.stats.FailedSyncs++
		if n.in.isDir() {
			if n.d.rng.IntN(2) == 0 {
				n.in.syncDir()
			}
		} else {
			n.in.failSync(n.d.rng)
		}
		return syscall.EIO
	}
	if n.in.isDir() {
		n.in.syncDir()
	} else {
		n.in.syncFile()
	}
	return 0
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	out.Bsize = 4096
	out.Frsize = 4096
	out.Blocks = 1 << 24
	out.Bfree = 1 << 23
	out.Bavail = 1 << 23
	out.Files = 1 << 20
	out.Ffree = 1 << 19
	out.NameLen = 255
	return 0
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	if !n.lock() {
		return nil, syscall.EIO
	}
	defer n.unlock()
	names := make([]string, 0, len(n.in.kids))
	for k := range n.in.kids {
		names = append(names, k)
	}
	sort.Strings(names)
	list := make([]fuse.DirEntry, 0, len(names))
	for _, k := range names {
		c := n.in.kids[k]
		list = append(list, fuse.DirEntry{Name: k, Ino: c.ino, Mode: c.mode})
	}
	return fs.NewListDirStream(list), 0
}

func (n *node) add(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if !n.in.isDir() {
		return nil, syscall.ENOTDIR
	}
	if _, ok := n.in.kids[name]; ok {
		return nil, syscall.EEXIST
	}
	c := n.m.newInode(mode)
	n.in.kids[name] = c
	n.in.dirDirty = true
	n.in.mtime = time.Now()
	return n.child(ctx, c, out), 0
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if !n.lock() {
		return nil, nil, 0, syscall.EIO
	}
	defer n.unlock()
	if c, ok := n.in.kids[name]; ok {
		if flags&syscall.O_EXCL != 0 {
			return nil, nil, 0, syscall.EEXIST
		}
		if flags&syscall.O_TRUNC != 0 && !c.isDir() {
			c.resize(0)
		}
		return n.child(ctx, c, out), nil, 0, 0
	}
	ch, errno := n.add(ctx, name, syscall.S_IFREG|mode&0o7777, out)
	return ch, nil, 0, errno
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if !n.lock() {
		return nil, syscall.EIO
	}
	defer n.unlock()
	return n.add(ctx, name, syscall.S_IFDIR|mode&0o7777, out)
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	if !n.lock() {
		return syscall.EIO
	}
	defer n.unlock()
	c, ok := n.in.kids[name]
	if !ok {
		return syscall.ENOENT
	}
	if c.isDir() {
		return syscall.EISDIR
	}
	delete(n.in.kids, name)
	c.nlink--
	n.in.dirDirty = true
	n.in.mtime = time.Now()
	return 0
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	if !n.lock() {
		return syscall.EIO
	}
	defer n.unlock()
	c, ok := n.in.kids[name]
	if !ok {
		return syscall.ENOENT
	}
	if !c.isDir() {
		return syscall.ENOTDIR
	}
	if len(c.kids) > 0 {
		return syscall.ENOTEMPTY
	}
	delete(n.in.kids, name)
	c.nlink = 0
	n.in.dirDirty = true
	n.in.mtime = time.Now()
	return 0
}

// renameNoReplace is RENAME_NOREPLACE of renameat2(2).
const renameNoReplace = 1

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if flags&^renameNoReplace != 0 {
		return syscall.EINVAL
	}
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	if !n.lock() {
		return syscall.EIO
	}
	defer n.unlock()
	c, ok := n.in.kids[name]
	if !ok {
		return syscall.ENOENT
	}
	old, exists := np.in.kids[newName]
	if exists {
		if flags&renameNoReplace != 0 {
			return syscall.EEXIST
		}
		if old == c {
			return 0
		}
		switch {
		case old.isDir() && !c.isDir():
			return syscall.EISDIR
		case !old.isDir() && c.isDir():
			return syscall.ENOTDIR
		case old.isDir() && len(old.kids) > 0:
			return syscall.ENOTEMPTY
		}
		old.nlink--
	}
	if c.isDir() {
		// Moving a directory under itself would make a cycle.
		for p := np.EmbeddedInode(); p != nil; {
			if pn, ok := p.Operations().(*node); ok && pn.in == c {
				return syscall.EINVAL
			}
			_, parent := p.Parent()
			p = parent
		}
	}
	delete(n.in.kids, name)
	np.in.kids[newName] = c
	n.in.dirDirty, np.in.dirDirty = true, true
	now := time.Now()
	n.in.mtime, np.in.mtime = now, now
	return 0
}
