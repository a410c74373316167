package election

import (
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
)

// ErrDataDirDamaged is returned by New when raft cannot start on what
// DataDir holds: a log with a gap between the last snapshot and the last
// entry (a torn write, a file restored from an older backup), or a
// snapshot whose index no valid log follows (a snapshot at an index near
// 2^64, which older termfence versions admitted from a peer). The error
// names what raft reported. Nothing was started; the node must be
// restored from a backup or, its data wiped, rejoin under a new ID
// (docs/DESIGN.md, I3).
var ErrDataDirDamaged = errors.New("election: data dir damaged")

// startRaft is raft.NewRaft, with a panic while it reads the stores (it
// panics, "log not found", on a missing entry after the last snapshot:
// api.go, NewRaft) turned into an error wrapping ErrDataDirDamaged. raft
// starts no goroutine before that scan, so nothing is left running.
func startRaft(rc *raft.Config, fsm raft.FSM, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore, tr raft.Transport) (r *raft.Raft, err error) {
	defer func() {
		if p := recover(); p != nil {
			r = nil
			first, _ := logs.FirstIndex()
			last, _ := logs.LastIndex()
			err = fmt.Errorf("%w: raft failed reading the log (entries %d..%d stored): %v", ErrDataDirDamaged, first, last, p)
		}
	}()
	return raft.NewRaft(rc, fsm, logs, stable, snaps, tr)
}
