package main

import (
	"github.com/termfence/termfence/election"
	"github.com/termfence/termfence/epoch"
)

// -stall-after-heal (TEST ONLY) plants a liveness bug for the fault suite's
// control (internal/chaos, TestChaosLivenessControl): after its first POST
// /fault heal the node withholds its epoch for good — its status shows no
// epoch and its writes answer 503 not leader — while raft goes on as
// before. A node that leads then leaves its cluster without an epoch, and
// nothing safety-related breaks: only a liveness oracle can see it.

// epoch is the epoch this node hands out: the election's, unless the
// planted bug has struck.
func (n *node) epoch() (epoch.Epoch, error) {
	if n.stalled.Load() {
		return epoch.Epoch{}, election.ErrNotLeader
	}
	return n.el.Epoch()
}

// stallOnHeal strikes the planted bug, with -stall-after-heal.
func (n *node) stallOnHeal() {
	if n.cfg.StallAfterHeal && !n.stalled.Swap(true) {
		n.log.Warn("stall-after-heal: this node withholds its epoch from now on (a planted liveness bug, TEST ONLY)")
	}
}
