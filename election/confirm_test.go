package election

import (
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/epoch"
)

// The confirm worker's decision, driven directly through a scripted raft
// (raftView): the interleavings below need raft to change its term or
// state at one precise point of confirm, which a live cluster reaches only
// by chance. Each test states the rule of docs/DESIGN.md it checks.

// scriptedRaft is a raft whose term, state and commit index the test sets.
// afterGetLog, if set, runs once after confirm reads the entry at the
// commit index: the point between "an entry of my term is committed" and
// the triple read that publishes.
type scriptedRaft struct {
	mu          sync.Mutex
	term        uint64
	state       raft.RaftState
	commit      uint64
	barrierErr  error
	afterGetLog func(*scriptedRaft)
}

func (r *scriptedRaft) CurrentTerm() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.term
}

func (r *scriptedRaft) State() raft.RaftState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state
}

func (r *scriptedRaft) CommitIndex() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.commit
}

func (r *scriptedRaft) Barrier(time.Duration) raft.Future {
	r.mu.Lock()
	defer r.mu.Unlock()
	return doneFuture{r.barrierErr}
}

// set changes the scripted raft under its lock.
func (r *scriptedRaft) set(f func(*scriptedRaft)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(r)
}

type doneFuture struct{ err error }

func (f doneFuture) Error() error { return f.err }

// scriptedLogs is the log confirm reads the committed entry from.
type scriptedLogs struct {
	*raft.InmemStore
	r *scriptedRaft
}

func (l scriptedLogs) GetLog(index uint64, out *raft.Log) error {
	err := l.InmemStore.GetLog(index, out)
	l.r.mu.Lock()
	f := l.r.afterGetLog
	l.r.afterGetLog = nil
	l.r.mu.Unlock()
	if f != nil {
		l.r.set(f)
	}
	return err
}

// appendEntry stores an entry of term at index and commits it.
func appendEntry(t *testing.T, l scriptedLogs, index, term uint64) {
	t.Helper()
	if err := l.StoreLog(&raft.Log{Index: index, Term: term, Type: raft.LogNoop}); err != nil {
		t.Fatal(err)
	}
	l.r.set(func(r *scriptedRaft) { r.commit = index })
}

// newScriptedElection is an Election with only what confirm uses, over a
// scripted raft that won term and leads it; nothing of it runs until the
// test calls confirm.
func newScriptedElection(t *testing.T, term uint64) (*Election, *scriptedRaft, scriptedLogs) {
	r := &scriptedRaft{term: term, state: raft.Leader}
	logs := scriptedLogs{raft.NewInmemStore(), r}
	e := &Election{
		cfg: Config{Cluster: "c", ID: "n1",
			// How long confirm waits for its own commit before it falls
			// back on a Barrier: short, since nothing commits meanwhile.
			ElectionTimeout: 5 * time.Millisecond, HeartbeatTimeout: 5 * time.Millisecond},
		log:      slog.New(slog.DiscardHandler),
		raftNode: &raftNode{view: r, logs: logs},
		workCh:   make(chan struct{}, 1),
		watchCh:  make(chan raft.Observation, 1),
		stop:     make(chan struct{}),
	}
	e.won.Store(true)
	return e, r, logs
}

// TestConfirmNeverPublishesAnotherTerm: confirm publishes a term only
// after an entry of that very term is committed. Here raft's commit index
// shows an entry of term 5, and right after confirm reads it this node
// loses term 5 and wins term 6 (leader again, before confirm's last
// triple read). An entry of term 5 says nothing about term 6: publishing
// 6 would hand out an epoch no quorum has accepted from this leader (a
// newer leader may already hold it elsewhere).
func TestConfirmNeverPublishesAnotherTerm(t *testing.T) {
	e, r, logs := newScriptedElection(t, 5)
	appendEntry(t, logs, 10, 5)
	r.set(func(r *scriptedRaft) {
		r.barrierErr = errors.New("scripted: barrier not confirmed yet")
		r.afterGetLog = func(r *scriptedRaft) { r.term = 6 }
	})
	done := e.confirm()
	if p := e.pubTerm.Load(); p != 0 {
		t.Fatalf("confirm published term %d although the only committed entry it saw is of term 5 (the node moved from term 5 to 6 after reading it)", p)
	}
	if done {
		t.Fatal("confirm gave up on term 6 instead of asking to be retried after its Barrier failed")
	}
	// Once an entry of term 6 commits, term 6 is published: the check
	// above was about the missing commit, not a confirm that never works.
	appendEntry(t, logs, 11, 6)
	if !e.confirm() || e.pubTerm.Load() != 6 {
		t.Fatalf("confirm after term 6's own entry committed: published %d, want 6", e.pubTerm.Load())
	}
}

// TestConfirmRefusesTermAboveMaxTerm: a term above epoch.MaxTerm is never
// published, even won and committed (only state written before admission
// bounded terms gets there); epoch.MaxTerm itself is.
func TestConfirmRefusesTermAboveMaxTerm(t *testing.T) {
	e, _, logs := newScriptedElection(t, epoch.MaxTerm+1)
	appendEntry(t, logs, 7, epoch.MaxTerm+1)
	if !e.confirm() {
		t.Fatal("confirm asked to be retried on a term above MaxTerm, want to give up")
	}
	if p := e.pubTerm.Load(); p != 0 {
		t.Fatalf("confirm published term %d, above epoch.MaxTerm %d", p, uint64(epoch.MaxTerm))
	}
	if _, ok := e.held(); ok {
		t.Fatal("the node holds an epoch in a term above epoch.MaxTerm")
	}

	e, _, logs = newScriptedElection(t, epoch.MaxTerm)
	appendEntry(t, logs, 7, epoch.MaxTerm)
	if !e.confirm() || e.pubTerm.Load() != epoch.MaxTerm {
		t.Fatalf("confirm in term epoch.MaxTerm published %d, want %d", e.pubTerm.Load(), uint64(epoch.MaxTerm))
	}
}

// TestConfirmWithdrawsOnStepDown: once raft reports this node is no
// longer leader (its State, or its NotifyCh), confirm withdraws the
// published epoch, counts the withdrawal and tells the watcher, whatever
// the triple read would say later.
func TestConfirmWithdrawsOnStepDown(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(*Election, *scriptedRaft)
	}{
		{"state follower", func(_ *Election, r *scriptedRaft) {
			r.set(func(r *scriptedRaft) { r.state = raft.Follower })
		}},
		{"notified lost", func(e *Election, _ *scriptedRaft) { e.won.Store(false) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, r, logs := newScriptedElection(t, 5)
			appendEntry(t, logs, 3, 5)
			if !e.confirm() || e.pubTerm.Load() != 5 {
				t.Fatalf("confirm published %d, want 5", e.pubTerm.Load())
			}
			select { // the publication's poke
			case <-e.watchCh:
			default:
				t.Fatal("publishing did not poke the watcher")
			}
			tc.lose(e, r)
			if !e.confirm() {
				t.Fatal("confirm asked to be retried after a step-down")
			}
			if p := e.pubTerm.Load(); p != 0 {
				t.Fatalf("the published term is still %d after the step-down", p)
			}
			e.stats.mu.Lock()
			withdrawn := e.stats.withdrawn
			e.stats.mu.Unlock()
			if withdrawn != 1 {
				t.Fatalf("%d withdrawals counted, want 1", withdrawn)
			}
			select {
			case <-e.watchCh:
			default:
				t.Fatal("the withdrawal did not poke the watcher")
			}
		})
	}
}
