package chaos

import (
	"syscall"
	"time"
)

// pinnedStop is the SIGSTOP both pausing faults make (nemesis.pause on the
// leader, pauseRoleOwner on a role owner) with writes pinned in the node's
// handler: the racing writes get their bodies a few tens of microseconds
// apart just before the SIGSTOP, so the stop lands at different points of
// their handling (some after the node took its epoch and before the store
// got the write); stopped runs while the node is stopped (it logs, and
// waits out the pause); the held writes get their bodies just before the
// SIGCONT, with their deadlines renewed (the pause may outlast the one set
// at open). Then every pinned write's answer is collected, racing ones
// first, and each, once answered, is handed to answered (nil: nothing).
func (n *nemesis) pinnedStop(nd *node, race, held []*pinned, stopped func(), answered func(*pinned)) error {
	for _, p := range race {
		p.sendBody()
		spin(25 * time.Microsecond)
	}
	if err := nd.proc.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	stopped()
	for _, p := range held {
		if !p.done {
			_ = p.conn.SetDeadline(time.Now().Add(n.cfg.WriteTimeout))
		}
		p.sendBody()
	}
	if err := nd.proc.signal(syscall.SIGCONT); err != nil {
		return err
	}
	for _, p := range append(race, held...) {
		p.finish(n.w, true)
		if answered != nil {
			answered(p)
		}
	}
	return nil
}
