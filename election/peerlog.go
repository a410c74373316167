package election

import (
	"time"

	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/internal/raftlog"
)

// startPeerLog tells raft's logger when the leader reaches a follower
// again (raft observes it but does not log it), so that an outage that
// internal/raftlog logged as "peer unreachable" ends with a line saying
// the peer is back and how many RPCs failed meanwhile. The same
// observations keep e.reach, the voters a handover may go to.
func (e *Election) startPeerLog() {
	ch := make(chan raft.Observation, 16)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.ResumedHeartbeatObservation, raft.FailedHeartbeatObservation:
			return true
		}
		return false
	})
	e.raft.RegisterObserver(obs)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer e.raft.DeregisterObserver(obs)
		for {
			select {
			case <-e.stop:
				return
			case o := <-ch:
				switch r := o.Data.(type) {
				case raft.ResumedHeartbeatObservation:
					e.reach.resumed(r.PeerID)
					raftlog.Resumed(e.rlog, string(r.PeerID), "")
				case raft.FailedHeartbeatObservation:
					e.reach.failed(r.PeerID, time.Now())
				}
			}
		}
	}()
}
