package election

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/termfence/termfence/transport"
)

const (
	// notifyBuffer is the capacity of the channel given to raft as
	// Config.NotifyCh. raft sends on it from its main goroutine with a
	// blocking send; the buffer and a drainer that never blocks keep raft
	// from ever waiting on us.
	notifyBuffer = 16
	// logCacheSize is the number of recent log entries kept in memory in
	// front of the bolt store.
	logCacheSize = 512
	// snapshotsRetained is the number of snapshots kept in DataDir.
	snapshotsRetained = 2
	// boltOpenTimeout bounds the wait for bbolt's file lock, so a second
	// opener of a DataDir fails instead of hanging.
	boltOpenTimeout = time.Second
)

// Election is one node of a Raft election group whose leader holds its term
// as a fencing epoch. It is safe for concurrent use. Create it with New and
// release it with Close.
type Election struct {
	cfg       Config // with defaults applied
	log       hclog.Logger
	raft      *raft.Raft
	bolt      *raftboltdb.BoltStore // nil when InMemory
	logs      raft.LogStore         // the store raft appends to (confirm reads it)
	localAddr string

	notifyCh chan bool             // raft's Config.NotifyCh
	won      atomic.Bool           // the latest value seen on notifyCh
	workCh   chan struct{}         // 1-buffered poke for the confirm worker
	watchCh  chan raft.Observation // 1-buffered poke for the watcher (also raft's observer channel)
	observer *raft.Observer

	// preVoteCh receives, without ever blocking raft, a poke for each
	// pre-vote request raft is asked; the waker reads it (wake.go).
	preVoteCh  chan raft.Observation
	preVoteObs *raft.Observer

	// rpcs is the channel raft consumes RPCs from: forward fills it from
	// the transport, and the waker adds a request of its own (wake.go).
	rpcs chan raft.RPC

	// pubTerm is the term of the published (confirmed) epoch, 0 for none.
	// Only the confirm worker writes it.
	pubTerm atomic.Uint64

	hub hub

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	stop      chan struct{}  // closed by Close after raft is shut down
	wg        sync.WaitGroup // drain, work, watch, waker, forward
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
	localAddr := string(c.Transport.LocalAddr())
	for _, s := range c.Bootstrap {
		if s.ID == c.ID && s.Addr != localAddr {
			return nil, fmt.Errorf("%w: Bootstrap gives %s the address %s but its transport's address is %s",
				ErrInvalidConfig, c.ID, s.Addr, localAddr)
		}
	}

	e := &Election{
		cfg:       c,
		log:       c.Logger,
		localAddr: localAddr,
		notifyCh:  make(chan bool, notifyBuffer),
		workCh:    make(chan struct{}, 1),
		watchCh:   make(chan raft.Observation, 1),
		preVoteCh: make(chan raft.Observation, 1),
		rpcs:      make(chan raft.RPC),
		stop:      make(chan struct{}),
	}
	e.hub.init()

	logs, stable, snaps, err := e.openStores()
	if err != nil {
		return nil, err
	}
	e.logs = logs
	closeStores := func() {
		if e.bolt != nil {
			_ = e.bolt.Close()
		}
	}

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.ID)
	rc.HeartbeatTimeout = c.HeartbeatTimeout
	rc.ElectionTimeout = c.ElectionTimeout
	rc.LeaderLeaseTimeout = c.LeaderLeaseTimeout
	rc.NotifyCh = e.notifyCh
	rc.Logger = c.Logger.Named("raft")
	// A removed node keeps running as a non-voter instead of shutting raft
	// down underneath this Election.
	rc.ShutdownOnRemove = false
	if err := raft.ValidateConfig(rc); err != nil {
		closeStores()
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}

	if len(c.Bootstrap) > 0 {
		exists, err := raft.HasExistingState(logs, stable, snaps)
		if err != nil {
			closeStores()
			return nil, fmt.Errorf("election: reading raft state: %w", err)
		}
		if !exists {
			conf := raft.Configuration{Servers: make([]raft.Server, 0, len(c.Bootstrap))}
			for _, s := range c.Bootstrap {
				conf.Servers = append(conf.Servers, raft.Server{
					Suffrage: raft.Voter, ID: raft.ServerID(s.ID), Address: raft.ServerAddress(s.Addr),
				})
			}
			if err := raft.BootstrapCluster(rc, logs, stable, snaps, c.Transport, conf); err != nil {
				closeStores()
				return nil, fmt.Errorf("election: bootstrap: %w", err)
			}
		}
	}

	r, err := raft.NewRaft(rc, c.FSM, logs, stable, snaps, mainLoopOnly{Transport: c.Transport, rpcs: e.rpcs})
	if err != nil {
		closeStores()
		return nil, fmt.Errorf("election: starting raft: %w", err)
	}
	e.raft = r

	// Leader and state changes poke the watcher; the observer never blocks
	// raft (a full channel already holds a poke).
	e.observer = raft.NewObserver(e.watchCh, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.LeaderObservation, raft.RaftState:
			return true
		}
		return false
	})
	r.RegisterObserver(e.observer)
	e.preVoteObs = raft.NewObserver(e.preVoteCh, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.RequestPreVoteRequest)
		return ok
	})
	r.RegisterObserver(e.preVoteObs)
	e.hub.publish(e.leadership())

	e.wg.Add(5)
	go e.forward(c.Transport.Consumer())
	go e.drain()
	go e.work()
	go e.watch()
	go e.waker()
	poke(e.workCh)
	pokeWatch(e.watchCh)
	return e, nil
}

// openStores opens the log store, stable store and snapshot store.
func (e *Election) openStores() (raft.LogStore, raft.StableStore, raft.SnapshotStore, error) {
	if e.cfg.InMemory {
		s := raft.NewInmemStore()
		return s, s, raft.NewInmemSnapshotStore(), nil
	}
	dir := e.cfg.DataDir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, nil, fmt.Errorf("election: data dir: %w", err)
	}
	path := filepath.Join(dir, "raft.db")
	store, err := raftboltdb.New(raftboltdb.Options{
		Path:        path,
		BoltOptions: &bbolt.Options{Timeout: boltOpenTimeout},
		NoSync:      false, // terms and votes must survive a crash (DESIGN.md I3)
	})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, nil, nil, fmt.Errorf("%w: %s is locked by another process or Election (waited %v): %w",
			ErrDataDirLocked, path, boltOpenTimeout, err)
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("election: opening %s: %w", path, err)
	}
	logs, err := raft.NewLogCache(logCacheSize, store)
	if err != nil {
		_ = store.Close()
		return nil, nil, nil, fmt.Errorf("election: log cache: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, snapshotsRetained, e.log.Named("snapshot"))
	if err != nil {
		_ = store.Close()
		return nil, nil, nil, fmt.Errorf("election: snapshot store: %w", err)
	}
	e.bolt = store
	return logs, store, snaps, nil
}

// Raft returns the underlying Raft node, for what this package does not
// wrap (Apply for an FSM, Stats, GetConfiguration). Leadership taken from it
// directly (State, LeaderCh) carries no epoch; use Epoch for that. Shutting
// it down makes this Election stop leading at once; Close is still needed
// to release the rest (and then skips the handover).
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
	errs := []error{}
	if err := e.raft.Shutdown().Error(); err != nil { // also closes the transport
		errs = append(errs, fmt.Errorf("election: raft shutdown: %w", err))
	}
	e.raft.DeregisterObserver(e.observer)
	e.raft.DeregisterObserver(e.preVoteObs)
	close(e.stop)
	e.wg.Wait()
	e.hub.close()
	if e.bolt != nil {
		if err := e.bolt.Close(); err != nil {
			errs = append(errs, fmt.Errorf("election: closing store: %w", err))
		}
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
	_ = e.raft.LeadershipTransfer() // watched through raft's state; see transfer
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
// waiting for raft's FSM goroutine, say) is never answered. A helper
// blocked on such a future would never end, so Close does not wait for the
// helpers; all others end as soon as raft answers.
func (e *Election) wait(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
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

// mainLoopOnly hands raft the configured transport with its heartbeat fast
// path switched off whatever the transport is, so that raft changes its term
// and state only on its main goroutine, which the triple read relies on
// (DESIGN.md I2, hashicorp/raft#695). The transports of package transport
// already do this; a raw *raft.NetworkTransport, which also satisfies
// transport.Transport, would not. Embedding keeps Close and RequestPreVote.
//
// Raft consumes rpcs instead of the transport's Consumer(): forward copies
// the transport's RPCs into it, one at a time, and the waker can hand raft a
// request of its own there (transferSelf).
type mainLoopOnly struct {
	transport.Transport
	rpcs chan raft.RPC
}

// SetHeartbeatHandler ignores cb: heartbeats reach raft on Consumer().
func (mainLoopOnly) SetHeartbeatHandler(func(raft.RPC)) {}

// Consumer returns the channel raft reads every RPC from.
func (m mainLoopOnly) Consumer() <-chan raft.RPC { return m.rpcs }

var _ transport.Transport = mainLoopOnly{}

// forward hands raft each RPC the transport receives. It holds at most one
// RPC, so raft's back-pressure on the transport is unchanged; an RPC it
// holds when Close stops it is answered by the transport's own shutdown.
func (e *Election) forward(in <-chan raft.RPC) {
	defer e.wg.Done()
	for {
		select {
		case rpc := <-in:
			select {
			case e.rpcs <- rpc:
			case <-e.stop:
				return
			}
		case <-e.stop:
			return
		}
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
