package election

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/transport"
)

// peerReach is the leader's view of which voters it reaches, from raft's
// heartbeat observations: a FailedHeartbeatObservation marks a peer
// unreachable, a ResumedHeartbeatObservation clears it, and a mark older
// than two heartbeat timeouts counts for nothing (raft retries a failing
// heartbeat at least every HeartbeatTimeout/2, so a peer that is still away
// keeps its mark fresh, while a mark from an earlier term fades).
// Raft's own choice of successor (pickServer) takes the first voter with
// the highest next index, which after a clean stop is often the node that
// just stopped; a handover to it cannot finish. The leader instead hands
// over to a voter it still reaches.
type peerReach struct {
	mu   sync.Mutex
	down map[raft.ServerID]time.Time // when a heartbeat to it last failed
}

func (p *peerReach) failed(id raft.ServerID, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down == nil {
		p.down = make(map[raft.ServerID]time.Time)
	}
	p.down[id] = at
}

func (p *peerReach) resumed(id raft.ServerID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.down, id)
}

// unreachable reports whether a heartbeat to id failed within fresh
// before now and none succeeded since.
func (p *peerReach) unreachable(id raft.ServerID, now time.Time, fresh time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.down[id]
	return ok && now.Sub(at) < fresh
}

// successor returns the voter a handover should go to: the first other
// voter of the configuration that this node reaches, else the first other
// voter. "Reaches": no fresh failed heartbeat, and, where the transport can
// probe (TCP), a connection to it opens now — a voter that closed cleanly a
// moment ago has not failed a heartbeat yet but refuses the connection.
// The probes run at once, each bounded by a quarter of ElectionTimeout.
// ok is false when there is no other voter.
func (e *Election) successor() (raft.Server, bool) {
	f := e.raft.GetConfiguration()
	if f.Error() != nil {
		return raft.Server{}, false
	}
	var others []raft.Server
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter && string(s.ID) != e.cfg.ID {
			others = append(others, s)
		}
	}
	if len(others) == 0 {
		return raft.Server{}, false
	}
	now := time.Now()
	reached := make([]chan bool, len(others))
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.ElectionTimeout/4)
	defer cancel()
	for i, s := range others {
		reached[i] = make(chan bool, 1)
		if e.reach.unreachable(s.ID, now, 2*e.cfg.HeartbeatTimeout) {
			reached[i] <- false
			continue
		}
		go func() {
			p, ok := e.cfg.Transport.(transport.Prober)
			if !ok {
				reached[i] <- true
				return
			}
			err := p.Probe(ctx, s.Address)
			reached[i] <- err == nil || errors.Is(err, transport.ErrCannotProbe)
		}()
	}
	pick := -1
	for i := range others {
		if <-reached[i] && pick < 0 {
			pick = i
		}
	}
	if pick < 0 {
		pick = 0
	}
	return others[pick], true
}

// transferToSuccessor starts one leadership transfer to successor().
func (e *Election) transferToSuccessor() raft.Future {
	s, ok := e.successor()
	if !ok {
		return e.raft.LeadershipTransfer() // raft answers with its own error
	}
	return e.raft.LeadershipTransferToServer(s.ID, s.Address)
}
