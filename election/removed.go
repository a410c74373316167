package election

import (
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// ErrRemoved is returned by WaitLeader on a node that knows it was removed
// from the cluster (RemoveServer on the leader), and is matched by the
// *HealthError of its readiness check (Lead keeps waiting instead, and
// resumes once the node is added back). Such a node no longer votes or
// leads and no leader will contact it again: restarting it changes nothing
// (it remembers the configuration that removed it). Add it again
// (AddVoter, AddMember) or retire it. Add it while a leader it knows
// leads: a node admits appends only from a voter of the latest
// configuration it holds, so one added back by a leader that was added
// after it was removed refuses that leader; hand leadership to a voter it knows
// first (TransferTo).
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
// change itself, which raft sends it before it stops replicating to it and
// the leader's RemoveServer sends it again once the change has committed,
// and keeps knowing it across restarts. A node that was down (or cut
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

// tellSends bounds the AppendEntries tellRemoved sends to one removed
// server, and tellEntries the entries one of them carries.
const (
	tellSends   = 8
	tellEntries = 1024
)

// tellRemoved makes sure that a server this leader removed receives the
// change that removed it. raft v1.7.2 sends that change as a best effort
// and can drop it: when the change is appended while an AppendEntries to
// the server is in flight, the stop check after that send takes the signal
// meant for the final send (replicateTo's CHECK_MORE in replication.go),
// so raft never sends it. That happens whenever replication to the server
// is busy — after a leader change, an AddVoter, a roles plan — and the
// server then never learns it was removed: it campaigns for good and a
// supervisor restarts it for failing its liveness check.
//
// So once the change has committed, the leader sends the server what the
// leader of the change's term could have sent it: the entries after the
// point where their logs meet up to the change, with the change's index as
// the commit index. Every entry sent is committed, so it matches the
// server's log wherever both hold one (nothing is truncated); a server
// that moved on to a newer term refuses it. The server then holds the
// change as committed: Removed reports it, and raft stops campaigning
// ("not part of stable configuration"). A server that cannot be reached
// in tellSends tries, or is more than tellEntries behind or behind what
// this log still holds, is not told (Removed's documented limit).
func (e *Election) tellRemoved(id, addr string, index uint64) {
	tr := e.cfg.Transport
	req := raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{
			ProtocolVersion: raft.ProtocolVersionMax,
			ID:              []byte(e.cfg.ID),
			Addr:            tr.EncodePeer(raft.ServerID(e.cfg.ID), raft.ServerAddress(e.localAddr)),
		},
		LeaderCommitIndex: index,
	}
	prev := index - 1 // first try: the change alone
	for range tellSends {
		select {
		case <-e.stop:
			return
		default:
		}
		entries, prevTerm, ok := e.entriesAfter(prev, index)
		if !ok {
			return // compacted already, or too many: the server is far behind
		}
		// The term is the change's: its leader could have sent all this.
		req.Term = entries[len(entries)-1].Term
		req.PrevLogEntry, req.PrevLogTerm, req.Entries = prev, prevTerm, entries
		var resp raft.AppendEntriesResponse
		err := tr.AppendEntries(raft.ServerID(id), raft.ServerAddress(addr), &req, &resp)
		switch {
		case err != nil:
			e.log.Debug("telling a removed server: send failed", "id", id, "error", err)
			select {
			case <-e.stop:
				return
			case <-time.After(e.cfg.HeartbeatTimeout / 2): // retry pacing
			}
		case resp.Success:
			e.log.Debug("told a removed server of its removal", "id", id, "index", index)
			return
		case resp.Term > req.Term:
			return // it moved on to a newer term: not this leader's to tell
		case prev == 0:
			return // refused from the start: nothing older to send
		default:
			prev = min(prev-1, resp.LastLog) // where their logs may meet
		}
	}
}

// entriesAfter returns the log entries prev+1..last and the term of entry
// prev (0 for prev 0), or false if this log no longer holds them or they
// are more than tellEntries.
func (e *Election) entriesAfter(prev, last uint64) ([]*raft.Log, uint64, bool) {
	if last-prev > tellEntries {
		return nil, 0, false
	}
	var prevTerm uint64
	if prev > 0 {
		var l raft.Log
		if err := e.logs.GetLog(prev, &l); err != nil {
			return nil, 0, false
		}
		prevTerm = l.Term
	}
	entries := make([]*raft.Log, 0, last-prev)
	for i := prev + 1; i <= last; i++ {
		l := new(raft.Log)
		if err := e.logs.GetLog(i, l); err != nil {
			return nil, 0, false
		}
		entries = append(entries, l)
	}
	return entries, prevTerm, true
}
