package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"log/slog"
)

// notifyBuffer is the capacity of the channel given to raft as
// Config.NotifyCh. raft sends on it from its main goroutine with a blocking
// send; the buffer and a drainer that never blocks keep raft from ever
// waiting on us.
const notifyBuffer = 16

// Election is one node of a Raft election group whose leader holds its term
// as a fencing epoch. It is safe for concurrent use. Create it with New and
// release it with Close.
type Election struct {
	cfg       Config // with defaults applied
	log       *slog.Logger
	*raftNode        // raft, its stores and its RPC inbox (raftnode.go)
	waker     *waker // wakes raft early on a silent leader (wake.go)

	notifyCh chan bool             // raft's Config.NotifyCh
	won      atomic.Bool           // the latest value seen on notifyCh
	workCh   chan struct{}         // 1-buffered poke for the confirm worker
	watchCh  chan raft.Observation // 1-buffered poke for the watcher (also raft's observer channel)
	observer *raft.Observer

	// pubTerm is the term of the published (confirmed) epoch, 0 for none.
	// Only the confirm worker writes it.
	pubTerm atomic.Uint64

	// confirmGate, when set (by tests only), makes the confirm worker wait
	// until the channel is closed before each confirmation: a worker held
	// back, to show that Epoch does not depend on it.
	confirmGate atomic.Pointer[chan struct{}]

	// heldHook, when set (by tests only), runs in Epoch between the
	// triple read that passed and the building of the epoch: the window
	// in which a step-down must not change the epoch handed out.
	heldHook atomic.Pointer[func()]
	// tripleHook, when set (by tests only), runs in the triple read
	// between the read of State and the second read of CurrentTerm.
	tripleHook atomic.Pointer[func()]

	hub  hub
	meta *metaStore // member metadata, replicated through the log (meta.go)

	roles *roles // named roles (roles.go)

	memberMu sync.Mutex // one membership check-and-change at a time (members.go)

	reach peerReach     // voters the leader's heartbeats reach (successor.go)
	clock leaderClock   // since when no leader / no confirmed epoch (health.go)
	seat  membership    // whether this node is still a member (removed.go)
	stats statsRecorder // counters behind Stats (stats.go)

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	stop      chan struct{}  // closed by Close after raft is shut down
	wg        sync.WaitGroup // forward, drain, work, watch
}

// New validates cfg, opens (or creates) the node's Raft state, bootstraps a
// new cluster if cfg.Bootstrap is set and there is no state yet, and starts
// Raft. On success the Election owns cfg.Transport; on error nothing is left
// running and the caller still owns the transport.
func New(cfg Config) (*Election, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	e := &Election{
		cfg:      c,
		log:      c.Logger,
		notifyCh: make(chan bool, notifyBuffer),
		workCh:   make(chan struct{}, 1),
		watchCh:  make(chan raft.Observation, 1),
		stop:     make(chan struct{}),
	}
	e.hub.init()
	e.meta = newMetaStore()
	e.meta.onChange = func() { pokeWatch(e.watchCh) }
	rc := c
	e.roles = newRoles(e, c)
	rc.FSM = wrapFSM(c.FSM, e.meta, e.roles.t)
	n, err := openNode(rc, e.notifyCh) // raftnode.go
	if err != nil {
		return nil, err
	}
	n.intercept = e.roles.intercept
	e.raftNode = n
	e.start()
	return e, nil
}

// start watches raft and starts the goroutines that turn its signals into
// epochs (epoch.go), Observe updates (observe.go) and early wakes (wake.go).
func (e *Election) start() {
	// Leader and state changes poke the watcher; the observer never blocks
	// raft (a full channel already holds a poke).
	e.observer = raft.NewObserver(e.watchCh, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.LeaderObservation, raft.RaftState:
			return true
		}
		return false
	})
	e.raft.RegisterObserver(e.observer)
	l := e.leadership()
	e.clock.track(l, time.Now())
	e.hub.publish(l)

	// Made before the watcher starts: it pokes the membership goroutine.
	e.seat.poke = make(chan struct{}, 1)
	e.wg.Add(4)
	go func() {
		defer e.wg.Done()
		e.forward(e.cfg.Transport.Consumer(), e.stop)
	}()
	go e.drain()
	go e.work()
	go e.watch()
	e.startMembership()
	e.startPeerLog()
	e.waker = newWaker(e.raft, e.cfg, e.localAddr, e.inbox)
	e.roles.start() // roleslease.go
	poke(e.workCh)
	pokeWatch(e.watchCh)
}

// Raft returns the underlying Raft node, for what this package does not
// wrap (Apply for an FSM, Stats, GetConfiguration). Leadership taken from it
// directly (State, LeaderCh) carries no epoch; use Epoch for that. Shutting
// it down makes this Election stop leading at once; Close is still needed
// to release the rest (and then skips the handover). The Election sets
// raft's HeartbeatTimeout and ElectionTimeout itself while it runs (it
// wakes raft early when a leader falls silent): do not change them through
// ReloadConfig.
func (e *Election) Raft() *raft.Raft { return e.raft }

// Close stops this node. A leader first hands leadership to another voter,
// waiting at most ElectionTimeout, so the cluster does not wait for a
// heartbeat timeout to notice it is gone. Then Raft, the transport and the
// stores are shut down, every Observe channel is closed, Lead and
// WaitLeader return ErrClosed, and every goroutine of this Election ends
// before Close returns — except, in a rare race, a helper blocked on a raft
// future that raft accepted but abandoned at shutdown (see wait). Close is
// idempotent; later calls return the first call's result, and every other
// method then returns ErrClosed.
func (e *Election) Close() error {
	e.closeOnce.Do(func() { e.closeErr = e.close() })
	return e.closeErr
}

func (e *Election) close() error {
	e.closed.Store(true)
	e.handover()
	e.settle(e.cfg.ElectionTimeout) // see closesettle.go
	errs := []error{}
	if err := e.raft.Shutdown().Error(); err != nil { // also closes the transport
		errs = append(errs, fmt.Errorf("election: raft shutdown: %w", err))
	}
	e.raft.DeregisterObserver(e.observer)
	e.waker.stop()
	close(e.stop)
	e.wg.Wait()
	e.hub.close()
	if err := e.closeStores(); err != nil {
		errs = append(errs, fmt.Errorf("election: closing store: %w", err))
	}
	return errors.Join(errs...)
}

// handover transfers leadership away if this node leads and another voter
// exists, waiting at most ElectionTimeout for this node to step down.
func (e *Election) handover() {
	if e.raft.State() != raft.Leader || !e.hasOtherVoter() {
		return
	}
	e.log.Info("closing: handing leadership over")
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.ElectionTimeout)
	defer cancel()
	updates := e.Observe(ctx)
	_ = e.transferToSuccessor() // watched through raft's state; see transfer
	for range updates {
		if e.raft.State() != raft.Leader {
			return
		}
	}
	if e.raft.State() == raft.Leader {
		e.log.Warn("closing: leadership handover did not finish within ElectionTimeout", "timeout", e.cfg.ElectionTimeout)
	}
}

func (e *Election) hasOtherVoter() bool {
	f := e.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter && string(s.ID) != e.cfg.ID {
			return true
		}
	}
	return false
}

// wait returns f's error, or ctx's error if ctx ends first, or ErrClosed
// if Close shuts raft down first. Cancelling stops the wait, not the
// operation.
//
// f.Error is called on a helper goroutine that is not waited for. raft
// answers every future it accepted before Shutdown returns, with one
// exception: a future still queued inside raft at that moment (a batch
// waiting for raft's FSM goroutine, say) is never answered. Close drains
// that queue first (closesettle.go), but a node whose raft was shut down
// underneath it (a crash in the tests) or whose queue did not drain in time
// would leave the helper blocked for good; endOnClose ends it when Close
// closes e.stop.
func (e *Election) wait(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	endOnClose(f, e.stop)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-e.stop:
		return ErrClosed
	}
}

// poke does a non-blocking send on a 1-buffered channel: if it is full a
// poke is already pending, which is as good.
func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func pokeWatch(ch chan raft.Observation) {
	select {
	case ch <- raft.Observation{}:
	default:
	}
}
