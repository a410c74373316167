package election

import (
	"errors"
	"sync"
	"time"
)

// ErrRemoved is returned by Lead and WaitLeader on a node that knows it was
// removed from the cluster (RemoveServer on the leader), and is matched by
// the *HealthError of its readiness check. Such a node no longer votes or
// leads and no leader will contact it again: restarting it changes nothing
// (it remembers the configuration that removed it). Add it again
// (AddVoter, AddMember) or retire it.
var ErrRemoved = errors.New("election: removed from the cluster")

// membership follows whether this node is in the latest Raft configuration
// it knows. It runs apart from the watcher because reading the
// configuration waits for raft's main loop, and Observe must never wait on
// raft.
type membership struct {
	poke chan struct{} // 1-buffered: re-read the configuration

	mu    sync.Mutex
	since time.Time // when this node learned it was removed; zero: a member
}

// Removed reports whether this node knows it was removed from the cluster:
// the latest configuration it holds (committed or not) names other servers
// but not this one. A removed node learns this from the configuration
// change itself, which the leader sends it before it stops replicating to
// it, and keeps knowing it across restarts. A node that was down (or cut
// off) while it was removed never receives that change: it cannot tell
// removal from a partition, and reports that it knows no leader instead.
// Removed turns false again once the node is added back.
func (e *Election) Removed() bool {
	return !e.removedSince().IsZero()
}

func (e *Election) removedSince() time.Time {
	e.seat.mu.Lock()
	defer e.seat.mu.Unlock()
	return e.seat.since
}

// startMembership starts the goroutine that re-reads the configuration
// whenever the watcher sees a change (a removed follower loses its leader,
// a removed leader steps down) and, while this node is removed, every
// ElectionTimeout, so that being added back is seen even when no leader
// change announces it.
func (e *Election) startMembership() {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		t := time.NewTicker(e.cfg.ElectionTimeout)
		defer t.Stop()
		for {
			select {
			case <-e.stop:
				return
			case <-e.seat.poke:
			case <-t.C:
				if !e.Removed() {
					continue
				}
			}
			e.checkMembership()
		}
	}()
	poke(e.seat.poke)
}

// checkMembership records whether the latest configuration names this node,
// logs a change, and has the watcher publish it.
func (e *Election) checkMembership() {
	f := e.raft.GetConfiguration()
	if f.Error() != nil {
		return // shut down: Close reports it
	}
	servers := f.Configuration().Servers
	member := len(servers) == 0 // no configuration yet: a node waiting to join
	for _, s := range servers {
		if string(s.ID) == e.cfg.ID {
			member = true
			break
		}
	}
	e.seat.mu.Lock()
	removed := !e.seat.since.IsZero()
	switch {
	case !member && !removed:
		e.seat.since = time.Now()
		e.log.Warn("removed from the cluster: this node no longer votes or leads; "+
			"it stays live but not ready until it is added again (or retired)",
			"id", e.cfg.ID, "members", len(servers))
	case member && removed:
		e.seat.since = time.Time{}
		e.log.Info("added to the cluster again", "id", e.cfg.ID)
	default:
		e.seat.mu.Unlock()
		return
	}
	e.seat.mu.Unlock()
	pokeWatch(e.watchCh)
}
