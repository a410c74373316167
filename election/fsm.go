package election

import (
	"io"

	"github.com/hashicorp/raft"
)

// nopFSM is the FSM used when Config.FSM is nil: it ignores every entry and
// snapshots nothing.
type nopFSM struct{}

func (nopFSM) Apply(*raft.Log) any { return nil }

func (nopFSM) Snapshot() (raft.FSMSnapshot, error) { return nopSnapshot{}, nil }

func (nopFSM) Restore(rc io.ReadCloser) error { return rc.Close() }

type nopSnapshot struct{}

func (nopSnapshot) Persist(sink raft.SnapshotSink) error { return sink.Close() }

func (nopSnapshot) Release() {}

var (
	_ raft.FSM         = nopFSM{}
	_ raft.FSMSnapshot = nopSnapshot{}
)
