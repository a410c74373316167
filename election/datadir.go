package election

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
)

// skipDataDirSync removes the data directory's fsyncs, for the control of
// the power-cut test only (powercut_linux_test.go), which must then lose
// the node's term.
var skipDataDirSync bool

// storeNoSync opens raft-boltdb with NoSync, for the control of the node
// power-cut test only (nodepower_linux_test.go), which must then see a
// node's term or vote go back.
var storeNoSync bool

// syncDataDir makes the data directory durable from the first byte, before
// raft reads or writes anything in it (docs/DESIGN.md I3): the entries of
// dir (raft.db, which bbolt creates but never syncs the name of, and
// snapshots/, which raft creates and never syncs the name of: call it once
// both exist), and the entry of dir and of each of its ancestors in its
// parent, up to the root. Whether a directory existed before this start
// says nothing about whether its name is on disk: systemd's
// StateDirectory= creates the data directory just before the first start
// and syncs nothing, another process may have created a parent and not yet
// synced it, or an earlier start may have failed between its mkdir and its
// sync. A cut would then take back the whole directory, and the node's
// term and vote with it. An ancestor this process may not open for reading
// ends the walk: it is somebody else's directory, not one created for the
// node, and is taken as durable.
func syncDataDir(dir string) error {
	if skipDataDirSync {
		return nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := fsyncDir(abs); err != nil {
		return err
	}
	for p := abs; filepath.Dir(p) != p; p = filepath.Dir(p) {
		err := fsyncDir(filepath.Dir(p))
		if errors.Is(err, os.ErrPermission) {
			return nil
		}
		if err != nil {
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
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	return nil
}

// snapshotsDir is the directory raft's FileSnapshotStore keeps its
// snapshots in, under the data directory (raft's snapPath).
const snapshotsDir = "snapshots"

// durableSnapshots is raft's FileSnapshotStore with the one sync it lacks:
// raft syncs a snapshot's files, renames its directory into place and
// syncs snapshots/, but never syncs the snapshot's own directory, so the
// names of its files (meta.json, state.bin) are not durable. A cut after
// raft compacted its log behind the snapshot would leave an empty
// snapshot directory and a log that starts after it: the node's state
// gone, and raft unable to restore it. Create syncs the new snapshot's
// directory once raft has created both files in it, before any byte of the
// snapshot is written; the rename keeps the directory and its entries.
type durableSnapshots struct {
	*raft.FileSnapshotStore
	dir string // the snapshots directory
}

// Create implements raft.SnapshotStore.
func (s durableSnapshots) Create(version raft.SnapshotVersion, index, term uint64,
	configuration raft.Configuration, configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.FileSnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	// raft's temporary directory for the snapshot: snapshots/<ID>.tmp.
	if err := fsyncDir(filepath.Join(s.dir, sink.ID()+".tmp")); err != nil {
		_ = sink.Cancel()
		return nil, fmt.Errorf("election: sync the new snapshot's directory: %w", err)
	}
	return sink, nil
}

var _ raft.SnapshotStore = durableSnapshots{}
