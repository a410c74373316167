package election

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/epoch"
)

// Leadership is one node's view of who leads.
type Leadership struct {
	// Term is this node's current Raft term as raft reports it together
	// with LeaderID. On the leader it is the term of Epoch. On a follower it
	// is the follower's own current term: normally the term LeaderID won,
	// but it is not proof of that (the follower may already have moved to a
	// newer term, or not yet heard of one).
	Term uint64
	// LeaderID and LeaderAddr name the leader this node knows of; empty
	// when it knows none (an election is under way, or it is cut off).
	LeaderID   string
	LeaderAddr string
	// LeaderMeta is the metadata the leader advertises (its Config.Meta,
	// typically its application URL), as replicated to this node; empty
	// when no leader is known or it advertises none (or this node has not
	// received it yet: Observe delivers a new value once it has).
	LeaderMeta string
	// Self reports whether Raft has made this node the leader. A Self
	// Leadership with a zero Epoch means the win is not confirmed yet (or
	// no longer holds): the node must not act as leader.
	Self bool
	// Epoch is this node's confirmed epoch when it holds one (see
	// Election.Epoch); zero otherwise, and always zero unless Self.
	Epoch epoch.Epoch
	// Removed reports that this node knows it was removed from the cluster
	// (see Election.Removed): it will know no leader until added again.
	Removed bool
}

// Leading reports whether the Leadership grants an epoch: Self with a
// confirmed Epoch.
func (l Leadership) Leading() bool { return l.Self && !l.Epoch.IsZero() }

// Status is a snapshot of this node's Raft state and epoch.
type Status struct {
	ID         string
	State      raft.RaftState
	Term       uint64 // current Raft term
	LeaderID   string // empty: no known leader
	LeaderAddr string
	LeaderMeta string      // the leader's advertised metadata (Leadership.LeaderMeta)
	Epoch      epoch.Epoch // zero unless this node holds a confirmed epoch
	Removed    bool        // this node knows it was removed (Election.Removed)
}

// Status returns this node's current state. After Close, State is
// raft.Shutdown.
func (e *Election) Status() Status {
	l := e.leadership()
	return Status{
		ID:         e.cfg.ID,
		State:      e.raft.State(),
		Term:       l.Term,
		LeaderID:   l.LeaderID,
		LeaderAddr: l.LeaderAddr,
		LeaderMeta: l.LeaderMeta,
		Epoch:      l.Epoch,
		Removed:    l.Removed,
	}
}

// Observe returns a channel that first receives this node's current
// Leadership and then every change to it. A subscriber that reads slowly may
// miss intermediate values but always ends up with the latest one: the
// channel holds one value, which a newer one replaces. Raft never waits for a
// subscriber. The channel is closed when ctx ends or the Election closes
// (after Close it is returned closed).
func (e *Election) Observe(ctx context.Context) <-chan Leadership {
	return e.hub.subscribe(ctx)
}

// WaitLeader blocks until this node knows a leader (itself with a confirmed
// epoch, or another node) and returns that Leadership. It returns ctx's
// error when ctx ends first, ErrClosed if the Election closes, and
// ErrRemoved once this node knows it was removed from the cluster.
func (e *Election) WaitLeader(ctx context.Context) (Leadership, error) {
	if err := ctx.Err(); err != nil {
		return Leadership{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for l := range e.Observe(ctx) {
		if l.Removed {
			return Leadership{}, ErrRemoved
		}
		if l.LeaderID != "" && (!l.Self || l.Leading()) {
			return l, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return Leadership{}, err
	}
	return Leadership{}, ErrClosed
}

// leadership reads this node's current Leadership.
func (e *Election) leadership() Leadership {
	l := e.raftLeadership()
	l.Removed = e.Removed()
	return l
}

func (e *Election) raftLeadership() Leadership {
	if ep, err := e.Epoch(); err == nil {
		return Leadership{Term: ep.Term, LeaderID: ep.Leader, LeaderAddr: e.localAddr, LeaderMeta: e.meta.get(ep.Leader), Self: true, Epoch: ep}
	}
	// Read the leader on both sides of the term so the pair is one raft
	// reported at one moment; retry a few times if it moved.
	var l Leadership
	for range 3 {
		addr, id := e.raft.LeaderWithID()
		term := e.raft.CurrentTerm()
		addr2, id2 := e.raft.LeaderWithID()
		l = Leadership{Term: term, LeaderID: string(id2), LeaderAddr: string(addr2), Self: string(id2) == e.cfg.ID}
		if addr == addr2 && id == id2 {
			break
		}
	}
	if l.LeaderID != "" {
		l.LeaderMeta = e.meta.get(l.LeaderID)
	}
	return l
}

// watch recomputes the Leadership after every poke (raft leader and state
// observations, NotifyCh transitions, epoch publication) and hands it to
// the subscribers.
func (e *Election) watch() {
	defer e.wg.Done()
	for {
		select {
		case <-e.stop:
			return
		case <-e.watchCh:
			l := e.leadership()
			e.clock.track(l, time.Now())
			e.hub.publish(l)
			poke(e.seat.poke) // a lost leader or a step-down may be a removal
		}
	}
}

// hub keeps the latest Leadership and the subscribers' channels. Each
// channel has a buffer of one; publishing replaces an unread value, so a
// publisher never blocks and a subscriber always ends on the latest value.
type hub struct {
	mu     sync.Mutex
	cur    Leadership
	closed bool
	subs   map[*subscriber]struct{}
}

type subscriber struct {
	ch   chan Leadership
	stop func() bool // unregisters the context.AfterFunc
}

func (h *hub) init() { h.subs = make(map[*subscriber]struct{}) }

func (h *hub) subscribe(ctx context.Context) <-chan Leadership {
	ch := make(chan Leadership, 1)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		close(ch)
		return ch
	}
	ch <- h.cur
	s := &subscriber{ch: ch}
	h.subs[s] = struct{}{}
	s.stop = context.AfterFunc(ctx, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := h.subs[s]; ok {
			delete(h.subs, s)
			close(s.ch)
		}
	})
	return ch
}

// publish records l and hands it to every subscriber, replacing any value
// it has not read yet. Equal consecutive values are not repeated.
func (h *hub) publish(l Leadership) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || l == h.cur {
		return
	}
	h.cur = l
	for s := range h.subs {
		select {
		case <-s.ch: // drop the unread, older value
		default:
		}
		s.ch <- l // cannot block: we are the only sender and the buffer is empty
	}
}

func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	for s := range h.subs {
		s.stop()
		delete(h.subs, s)
		close(s.ch)
	}
}
