package election

import (
	"context"
	"time"

	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/epoch"
)

// Epoch returns this node's fencing epoch {Cluster, Term, ID} if, at the
// moment of the call, this node is Raft leader of the term it won and has
// confirmed (invariant I1 in docs/DESIGN.md). Each call repeats the triple
// read — CurrentTerm, State == Leader, CurrentTerm again, both terms equal
// to the confirmed one — so it fails the moment this node steps down, even
// before the step-down is reported anywhere else. The error is a
// *NotLeaderError (matching ErrNotLeader), or ErrClosed.
//
// A successful result is a statement about the instant of the call: the
// node may be deposed right after it. Present the epoch to a fence, which is
// what refuses it once a newer one was seen.
func (e *Election) Epoch() (epoch.Epoch, error) {
	if e.closed.Load() {
		return epoch.Epoch{}, ErrClosed
	}
	if t, ok := e.held(); ok {
		if h := e.heldHook.Load(); h != nil {
			(*h)()
		}
		// The epoch is built from the term the triple read checked, never
		// from a later read: raft may have moved on since.
		return epoch.Epoch{Cluster: e.cfg.Cluster, Term: t, Leader: e.cfg.ID}, nil
	}
	return epoch.Epoch{}, e.notLeader()
}

// held reports the confirmed term if this node holds it now.
func (e *Election) held() (uint64, bool) {
	p := e.pubTerm.Load()
	t, ok := e.tripleRead()
	return p, ok && p != 0 && t == p
}

// tripleRead returns the current term and whether this node was Leader in
// that very term. raft changes its term only while not Leader and only from
// its main goroutine (New gives raft its transport through
// transport.MainLoopOnly: invariant I2 in docs/DESIGN.md), and enters
// Leader only in a term it won; so if the term is the same before and after
// a read of State == Leader, the node was leader of that term at the moment
// State was read.
func (e *Election) tripleRead() (uint64, bool) {
	t1 := e.view.CurrentTerm()
	leader := e.view.State() == raft.Leader
	if h := e.tripleHook.Load(); h != nil {
		(*h)()
	}
	t2 := e.view.CurrentTerm()
	return t1, leader && t1 == t2
}

// Token returns Epoch signed with Config.Signer (epoch.Plain() by default):
// the string to send to a fenced resource. Errors are those of Epoch, or the
// signer's.
func (e *Election) Token() (string, error) {
	ep, err := e.Epoch()
	if err != nil {
		return "", err
	}
	return e.cfg.Signer.Sign(ep)
}

func (e *Election) notLeader() error {
	addr, id := e.raft.LeaderWithID()
	if string(id) == e.cfg.ID {
		// raft made this node leader but the epoch is not (or no longer)
		// confirmed: there is nobody to forward to yet.
		return &NotLeaderError{}
	}
	nl := &NotLeaderError{LeaderID: string(id), LeaderAddr: string(addr)}
	if nl.LeaderID != "" {
		nl.LeaderMeta = e.meta.get(nl.LeaderID)
	}
	return nl
}

// drain empties raft's NotifyCh. It never blocks on anything but the
// channel itself: it records the latest transition and pokes the worker and
// the watcher through 1-buffered channels.
func (e *Election) drain() {
	defer e.wg.Done()
	for {
		select {
		case <-e.stop:
			return
		case won := <-e.notifyCh:
			if won && !e.won.Load() {
				e.stats.won(time.Now())
			}
			e.won.Store(won)
			poke(e.workCh)
			pokeWatch(e.watchCh)
		}
	}
}

// work confirms epochs: after each poke it brings the published term in
// line with raft. A Barrier that fails while this node still leads the same
// term (a leadership transfer in progress, say) is retried after a short
// pause.
func (e *Election) work() {
	defer e.wg.Done()
	var retry <-chan time.Time
	for {
		select {
		case <-e.stop:
			return
		case <-e.workCh:
		case <-retry:
		}
		retry = nil
		if g := e.confirmGate.Load(); g != nil {
			select {
			case <-*g:
			case <-e.stop:
				return
			}
		}
		if !e.confirm() {
			retry = time.After(e.retryInterval())
		}
	}
}

func (e *Election) retryInterval() time.Duration {
	return max(e.cfg.HeartbeatTimeout/10, MinTimeout)
}

// confirm publishes the current term if this node won it and has seen an
// entry of that term committed, and withdraws the published term otherwise.
// It returns false if it should be retried later.
func (e *Election) confirm() bool {
	for {
		select {
		case <-e.stop:
			return true
		default:
		}
		if !e.won.Load() || e.view.State() != raft.Leader {
			e.unpublish()
			return true
		}
		t0 := e.view.CurrentTerm()
		if _, ok := e.held(); ok {
			return true // already confirmed for the current term
		}
		e.unpublish()
		committed, stillLeader := e.awaitOwnCommit(t0)
		if !committed && stillLeader {
			if err := e.wait(context.Background(), e.view.Barrier(0)); err != nil {
				if t, ok := e.tripleRead(); ok && t == t0 {
					e.log.Debug("barrier failed while leader, will retry", "term", t0, "error", err)
					return false
				}
				continue // leadership changed; look again
			}
		}
		if m := e.cfg.Meta; m != "" && e.meta.get(e.cfg.ID) != m {
			// Advertise this node's metadata before its first epoch, so
			// that whoever learns it leads can also learn where to send
			// clients.
			if err := e.recordMeta(context.Background(), e.cfg.ID, m); err != nil {
				if t, ok := e.tripleRead(); ok && t == t0 {
					e.log.Debug("recording metadata failed while leader, will retry", "term", t0, "error", err)
					return false
				}
				continue
			}
		}
		t1, ok := e.tripleRead()
		if !ok || t1 != t0 {
			// Stepped down between the win and here (or lost and won a
			// newer term, which needs its own commit): never publish t0.
			continue
		}
		if t1 > epoch.MaxTerm {
			// Only state written before the admission layer bounded terms
			// gets here; no fence would accept such an epoch.
			e.log.Error("won a term above epoch.MaxTerm, no epoch is handed out: a message raised this cluster's terms before termfence refused such terms; recreate the cluster with new data directories",
				"term", t1, "max-term", epoch.MaxTerm)
			return true
		}
		e.stats.confirm(time.Now()) // before publishing: whoever sees the epoch sees it counted
		e.pubTerm.Store(t1)
		e.log.Info("epoch confirmed", "cluster", e.cfg.Cluster, "term", t1, "leader", e.cfg.ID)
		pokeWatch(e.watchCh)
		return true
	}
}

// commitPoll is how often awaitOwnCommit looks at raft's commit index.
const commitPoll = 200 * time.Microsecond

// awaitOwnCommit waits until raft's commit index reaches an entry of term
// t0 while this node leads t0. committed reports that it did; stillLeader
// that this node still leads t0 (when committed is false: it gave up after
// ElectionTimeout, and the caller falls back to a Barrier).
//
// Why this is the Barrier's proof, one entry earlier: on entering the
// leader state raft appends a no-op entry in its new term and replicates it
// (raft.go runLeader, "noop"), and a leader's commit index only ever
// advances to an index of its own term (commitment.go: matched >=
// startIndex, the first index of the term). A Barrier is confirmed by
// exactly the same thing — a committed entry of term t0, which a quorum
// accepted from this node as leader of t0 — it is just one more entry
// after the no-op. So if the entry at raft's commit index has term t0, a
// quorum has stored an entry this node appended as leader of t0: the
// Barrier would prove nothing more, and waiting for it costs another
// fsync and round trip. The triple read that follows, as after a Barrier,
// checks that this node still leads t0 at the moment of publishing; since a
// node enters Leader only in a term it has just won, leading t0 then means
// it led t0 without a break since the win, so the commit index it read was
// this leader's own (a follower's commit index, which a later leader may
// advance over a t0 entry, is never trusted: that node fails the triple
// read). TestStepDownBeforePublish fails if the wait is skipped or if an
// older term's commit is accepted.
func (e *Election) awaitOwnCommit(t0 uint64) (committed, stillLeader bool) {
	deadline := time.Now().Add(e.cfg.ElectionTimeout)
	tick := time.NewTicker(commitPoll)
	defer tick.Stop()
	for {
		if t, ok := e.tripleRead(); !ok || t != t0 {
			return false, false
		}
		if ci := e.view.CommitIndex(); ci > 0 {
			var l raft.Log
			if err := e.logs.GetLog(ci, &l); err == nil && l.Term == t0 {
				return true, true
			}
		}
		if time.Now().After(deadline) {
			return false, true
		}
		select {
		case <-e.stop:
			return false, false
		case <-tick.C: // poll interval
		}
	}
}

// raftView is the part of raft that the triple read and confirm read:
// raft itself, or in confirm_test.go a scripted raft that drives confirm
// through the interleavings a live cluster hits only by chance.
type raftView interface {
	CurrentTerm() uint64
	State() raft.RaftState
	CommitIndex() uint64
	Barrier(timeout time.Duration) raft.Future
}

func (e *Election) unpublish() {
	if old := e.pubTerm.Swap(0); old != 0 {
		e.stats.withdraw()
		// The same attributes as "epoch confirmed": the two lines pair up.
		if e.closed.Load() {
			e.log.Debug("epoch withdrawn: closing", "cluster", e.cfg.Cluster, "term", old, "leader", e.cfg.ID) // expected: not news
		} else {
			e.log.Info("epoch withdrawn", "cluster", e.cfg.Cluster, "term", old, "leader", e.cfg.ID)
		}
		pokeWatch(e.watchCh)
	}
}
