package election

import (
	"time"

	"github.com/hashicorp/raft"
)

// settle waits, for at most d, until raft's FSM queue is empty, before
// Close shuts raft down. A batch of committed entries still queued for
// raft's FSM goroutine when Shutdown runs is dropped with its futures
// unanswered, and a goroutine waiting on one of them (wait's helper) would
// never end; the batch being applied when Shutdown runs is finished and
// answered. Closing a node that is no longer leader adds no entries of its
// own, so the queue only drains.
func (e *Election) settle(d time.Duration) {
	if e.raft.State() == raft.Shutdown {
		return // shut down already (a crash): too late, and Stats would log
	}
	deadline := time.Now().Add(d)
	for e.raft.Stats()["fsm_pending"] != "0" && time.Now().Before(deadline) {
		if e.raft.State() == raft.Shutdown {
			return
		}
		time.Sleep(time.Millisecond) // poll: raft offers no notification for it
	}
}
