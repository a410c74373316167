package election

import (
	"os"
	"path/filepath"
)

// skipDataDirSync removes the data directory's fsync, for the control of
// the power-cut test only (powercut_linux_test.go), which must then lose
// the node's term.
var skipDataDirSync bool

// storeNoSync opens raft-boltdb with NoSync, for the control of the node
// power-cut test only (nodepower_linux_test.go), which must then see a
// node's term or vote go back.
var storeNoSync bool

// firstExisting returns dir, or its nearest ancestor that exists.
func firstExisting(dir string) string {
	p := filepath.Clean(dir)
	for {
		if _, err := os.Lstat(p); err == nil || filepath.Dir(p) == p {
			return p
		}
		p = filepath.Dir(p)
	}
}

// syncDataDir makes dir's entries durable (raft.db, which bbolt creates
// but never syncs the name of), and the entries of each parent up to
// existing, the nearest ancestor that existed before the node created the
// rest: otherwise a power cut can take raft.db back, and the node's term
// and vote with it (docs/DESIGN.md I2).
func syncDataDir(dir, existing string) error {
	if skipDataDirSync {
		return nil
	}
	if err := fsyncDir(dir); err != nil {
		return err
	}
	for p := filepath.Clean(dir); p != existing && filepath.Dir(p) != p; p = filepath.Dir(p) {
		if err := fsyncDir(filepath.Dir(p)); err != nil {
			return err
		}
	}
	return nil
}

func fsyncDir(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
