//go:build unix && !aix

package dirfence

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrNotRegular is returned when an entry the fence opens in its directory
// is not a regular file: a symbolic link (which the fence never follows,
// so that one planted in the directory cannot make it create or write a
// file elsewhere), a FIFO, a device or a directory. Nothing is created or
// written through it.
var ErrNotRegular = errors.New("dirfence: fence directory entry is not a regular file")

// syncKind says what a sync is for.
type syncKind int

const (
	syncData syncKind = iota // a fence file's data (fdatasync)
	syncFile                 // a new file, data and metadata (fsync)
	syncDir                  // the directory's entries (fsync)
)

// skipSyncs names syncs a test removes to show that a test fails without
// them; zero (always, outside tests) removes none.
type skipSyncs int

const (
	skipRaiseData skipSyncs = 1 << iota // raise: the fdatasync of the slot
	skipLoadData                        // load: the fdatasync of a record another process wrote (D4)
	skipLoadDir                         // load: the fsync of the directory that names it (D5)
)

// openAt opens name in the fence directory, relative to the directory the
// fence opened (never through a path that could be swapped), never
// following a symbolic link, and refuses anything but a regular file.
// perm is used when flag creates the file.
func (d *Fence) openAt(name string, flag int, perm os.FileMode) (*os.File, error) {
	var fd int
	var err error
	for {
		fd, err = unix.Openat(int(d.dirFile.Fd()), name, flag|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, uint32(perm.Perm()))
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		if err == unix.ELOOP || err == unix.EMLINK { // EMLINK: FreeBSD's O_NOFOLLOW on a link
			if st, serr := d.lstatAt(name); serr == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				return nil, fmt.Errorf("%w: %s is a symbolic link", ErrNotRegular, filepath.Join(d.dir, name))
			}
		}
		return nil, &os.PathError{Op: "openat", Path: filepath.Join(d.dir, name), Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fstat", Path: filepath.Join(d.dir, name), Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: %s has mode %#o", ErrNotRegular, filepath.Join(d.dir, name), st.Mode)
	}
	// Back to blocking: O_NONBLOCK only kept a planted FIFO from hanging
	// the open.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fcntl", Path: filepath.Join(d.dir, name), Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(d.dir, name)), nil
}

// lstatAt stats name in the fence directory without following a link.
func (d *Fence) lstatAt(name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstatat(int(d.dirFile.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, err
}

// renameAt renames from to to within the fence directory.
func (d *Fence) renameAt(from, to string) error {
	dfd := int(d.dirFile.Fd())
	if err := unix.Renameat(dfd, from, dfd, to); err != nil {
		return &os.LinkError{Op: "renameat", Old: filepath.Join(d.dir, from), New: filepath.Join(d.dir, to), Err: err}
	}
	return nil
}

// unlinkAt removes name from the fence directory.
func (d *Fence) unlinkAt(name string) error {
	if err := unix.Unlinkat(int(d.dirFile.Fd()), name, 0); err != nil {
		return &os.PathError{Op: "unlinkat", Path: filepath.Join(d.dir, name), Err: err}
	}
	return nil
}

// sync makes f durable as kind says. Every sync of the fence goes through
// here, so that tests can count them, or fail one (syncHook).
func (d *Fence) sync(f *os.File, kind syncKind) error {
	if d.syncHook != nil {
		if err := d.syncHook(f, kind); err != nil {
			return err
		}
	}
	if kind == syncData {
		return datasync(f)
	}
	return f.Sync()
}

// syncUnless is sync, unless a test removed this sync (Fence.skip).
func (d *Fence) syncUnless(s skipSyncs, f *os.File, kind syncKind) error {
	if d.skip&s != 0 {
		return nil
	}
	return d.sync(f, kind)
}

// syncAncestors makes the path to dir durable before any raise through it
// is acknowledged (I5): it fsyncs the parent of dir and of each of its
// ancestors, up to the root. Whether dir (or an ancestor) existed before
// says nothing about whether its name is on disk: another process may
// have just created it and not yet synced its parent, or its sync may have
// failed (its Open returned the error, and nobody would sync it again), and
// a power cut would then take back the whole directory and every raise
// recorded in it. An ancestor this process may not open for reading ends
// the walk: it is taken as durable (somebody else's directory, not one a
// fence just created).
func syncAncestors(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("dirfence: fence dir %s: %w", dir, err)
	}
	for p := abs; filepath.Dir(p) != p; p = filepath.Dir(p) {
		parent := filepath.Dir(p)
		f, err := os.Open(parent)
		if errors.Is(err, os.ErrPermission) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("dirfence: open the directory of %s to sync it: %w", p, err)
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return fmt.Errorf("dirfence: sync the directory of %s: %w", p, err)
		}
	}
	return nil
}
