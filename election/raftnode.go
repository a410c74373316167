package election

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/termfence/termfence/internal/raftlog"
	"github.com/termfence/termfence/transport"
)

const (
	// logCacheSize is the number of recent log entries kept in memory in
	// front of the bolt store.
	logCacheSize = 512
	// snapshotsRetained is the number of snapshots kept in DataDir.
	snapshotsRetained = 2
	// boltOpenTimeout bounds the wait for bbolt's file lock, so a second
	// opener of a DataDir fails instead of hanging.
	boltOpenTimeout = time.Second
)

// raftNode is this node's running raft and what it was built from.
type raftNode struct {
	raft      *raft.Raft
	bolt      *raftboltdb.BoltStore // nil when InMemory
	logs      raft.LogStore         // the store raft appends to (confirm reads it)
	localAddr string                // the transport's address

	// inbox is the channel raft consumes RPCs from instead of the
	// transport's Consumer(): forward fills it with the RPCs admit lets
	// through, and the waker hands raft a request of its own there.
	inbox chan raft.RPC
	admit *admission // admission.go
}

// openNode opens (or creates) the node's stores, bootstraps a new cluster
// if c.Bootstrap is set and there is no state yet, and starts raft with
// notifyCh as its NotifyCh. c has defaults applied. On error nothing is
// left open and the caller still owns c.Transport.
func openNode(c Config, notifyCh chan<- bool) (*raftNode, error) {
	n := &raftNode{localAddr: string(c.Transport.LocalAddr()), inbox: make(chan raft.RPC)}
	if err := checkSelfAddr(c, n.localAddr); err != nil {
		return nil, err
	}
	if id := transport.LocalServerID(c.Transport); id != "" && id != c.ID {
		return nil, fmt.Errorf("%w: ID is %s but the transport's TLS certificate names server %s: every peer would refuse this node's RPCs",
			ErrInvalidConfig, c.ID, id)
	}
	rc := raftConfig(c, notifyCh)
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	logs, stable, snaps, err := n.openStores(c)
	if err != nil {
		return nil, err
	}
	n.logs = logs
	if err := bootstrap(c, rc, logs, stable, snaps); err != nil {
		_ = n.closeStores()
		return nil, err
	}
	// raft reads RPCs from inbox, and never gets a heartbeat fast path
	// (transport.MainLoopOnly), whatever transport the caller passed.
	tr := transport.MainLoopOnly(inboxTransport{Transport: c.Transport, inbox: n.inbox})
	r, err := raft.NewRaft(rc, c.FSM, logs, stable, snaps, tr)
	if err != nil {
		_ = n.closeStores()
		return nil, fmt.Errorf("election: starting raft: %w", err)
	}
	n.raft = r
	n.admit = &admission{raft: r, log: c.Logger, self: rc.LocalID}
	return n, nil
}

// checkSelfAddr refuses a Bootstrap that gives this node another address
// than its transport's: its peers could never reach it.
func checkSelfAddr(c Config, localAddr string) error {
	for _, s := range c.Bootstrap {
		if s.ID == c.ID && s.Addr != localAddr {
			return fmt.Errorf("%w: Bootstrap gives %s the address %s but its transport's address is %s",
				ErrInvalidConfig, c.ID, s.Addr, localAddr)
		}
	}
	return nil
}

// raftConfig is the raft configuration of c.
func raftConfig(c Config, notifyCh chan<- bool) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.ID)
	rc.HeartbeatTimeout = c.HeartbeatTimeout
	rc.ElectionTimeout = c.ElectionTimeout
	rc.LeaderLeaseTimeout = c.LeaderLeaseTimeout
	rc.NotifyCh = notifyCh
	rc.Logger = raftlog.New(c.Logger, "raft")
	// A removed node keeps running as a non-voter instead of shutting raft
	// down underneath this Election.
	rc.ShutdownOnRemove = false
	return rc
}

// bootstrap writes c.Bootstrap as the first configuration if it is set and
// the stores hold no raft state yet.
func bootstrap(c Config, rc *raft.Config, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore) error {
	if len(c.Bootstrap) == 0 {
		return nil
	}
	exists, err := raft.HasExistingState(logs, stable, snaps)
	if err != nil {
		return fmt.Errorf("election: reading raft state: %w", err)
	}
	if exists {
		return nil
	}
	conf := raft.Configuration{Servers: make([]raft.Server, 0, len(c.Bootstrap))}
	for _, s := range c.Bootstrap {
		conf.Servers = append(conf.Servers, raft.Server{
			Suffrage: raft.Voter, ID: raft.ServerID(s.ID), Address: raft.ServerAddress(s.Addr),
		})
	}
	if err := raft.BootstrapCluster(rc, logs, stable, snaps, c.Transport, conf); err != nil {
		return fmt.Errorf("election: bootstrap: %w", err)
	}
	return nil
}

// openStores opens the log store, stable store and snapshot store.
func (n *raftNode) openStores(c Config) (raft.LogStore, raft.StableStore, raft.SnapshotStore, error) {
	if c.InMemory {
		s := raft.NewInmemStore()
		return s, s, raft.NewInmemSnapshotStore(), nil
	}
	dir := c.DataDir
	existing := firstExisting(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, nil, fmt.Errorf("election: data dir: %w", err)
	}
	path := filepath.Join(dir, "raft.db")
	store, err := raftboltdb.New(raftboltdb.Options{
		Path:        path,
		BoltOptions: &bbolt.Options{Timeout: boltOpenTimeout},
		NoSync:      storeNoSync, // false outside one test's control: terms and votes must survive a crash (invariant I3 in docs/DESIGN.md)
	})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, nil, nil, fmt.Errorf("%w: %s is locked by another process or Election (waited %v): %w",
			ErrDataDirLocked, path, boltOpenTimeout, err)
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("election: opening %s: %w", path, err)
	}
	if err := syncDataDir(dir, existing); err != nil {
		_ = store.Close()
		return nil, nil, nil, fmt.Errorf("election: sync data dir %s: %w", dir, err)
	}
	logs, err := raft.NewLogCache(logCacheSize, store)
	if err != nil {
		_ = store.Close()
		return nil, nil, nil, fmt.Errorf("election: log cache: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, snapshotsRetained, raftlog.New(c.Logger, "snapshot"))
	if err != nil {
		_ = store.Close()
		return nil, nil, nil, fmt.Errorf("election: snapshot store: %w", err)
	}
	n.bolt = store
	return logs, store, snaps, nil
}

// closeStores closes the bolt store, if any. Call it once raft is shut
// down (or was never started).
func (n *raftNode) closeStores() error {
	if n.bolt == nil {
		return nil
	}
	return n.bolt.Close()
}

// inboxTransport is the configured transport with inbox as its Consumer().
type inboxTransport struct {
	transport.Transport
	inbox chan raft.RPC
}

// Consumer returns the channel raft reads every RPC from.
func (t inboxTransport) Consumer() <-chan raft.RPC { return t.inbox }

// forward hands raft each RPC the transport receives on in that the
// admission layer lets through (admission.go), until stop is closed; it
// answers the others itself. It holds at most one RPC, so raft's
// back-pressure on the transport is unchanged; an RPC it holds when stop
// closes is answered by the transport's own shutdown.
func (n *raftNode) forward(in <-chan raft.RPC, stop <-chan struct{}) {
	for {
		select {
		case rpc := <-in:
			if !n.admit.admit(rpc) {
				continue
			}
			select {
			case n.inbox <- rpc:
			case <-stop:
				return
			}
		case <-stop:
			return
		}
	}
}
