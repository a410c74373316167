// Package dirsync makes the path to a file durable: the names in its
// directory, and the entry of that directory and of each of its ancestors
// in its parent. fsync(2) of a file never makes its name durable, and
// fsync of a directory makes only that directory's entries durable, not
// the directory's own entry in its parent: a file-backed fence in a
// directory the application just created (os.MkdirAll syncs nothing)
// would vanish at a power cut with every raise in it.
package dirsync

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
)

// Path fsyncs dir and every ancestor of dir up to the root, so that the
// names in dir and dir's own path survive a power cut. Whether a directory
// existed before says nothing about whether its name is on disk (another
// process, or systemd, may have created it and synced nothing), so the
// walk does not stop at the first directory that existed. An ancestor this
// process may not open for reading ends the walk: it is somebody else's
// directory, taken as durable. On Windows, which cannot open a directory
// for fsync and needs none, Path does nothing.
func Path(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := syncDir(abs); err != nil {
		return err
	}
	for p := abs; filepath.Dir(p) != p; p = filepath.Dir(p) {
		err := syncDir(filepath.Dir(p))
		if errors.Is(err, os.ErrPermission) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// syncDir fsyncs one directory: the names in it become durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}
