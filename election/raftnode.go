package election

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
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
	view      raftView              // raft as the triple read and confirm see it (epoch.go)
	bolt      *raftboltdb.BoltStore // nil when InMemory
	logs      raft.LogStore         // the store raft appends to (confirm reads it)
	localAddr string                // the transport's address

	// inbox is the channel raft consumes RPCs from instead of the
	// transport's Consumer(): forward fills it with the RPCs admit lets
	// through, and the waker hands raft a request of its own there.
	inbox chan raft.RPC
	admit *admission // admission.go
	term  *termSource
	rlog  hclog.Logger // raft's logger (internal/raftlog), told when a peer is back (peerlog.go)

	// intercept, if set, takes an RPC out of the stream before admission
	// and raft (role renewals: roleslease.go); it reports whether it did.
	intercept func(raft.RPC) bool
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
	n.rlog = rc.Logger
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
	n.term = &termSource{self: raft.ServerID(c.ID)}
	tr := transport.MainLoopOnly(inboxTransport{Transport: c.Transport, inbox: n.inbox, term: n.term})
	r, err := startRaft(rc, c.FSM, logs, stable, snaps, tr) // startraft.go
	if err != nil {
		_ = n.closeStores()
		return nil, fmt.Errorf("election: starting raft: %w", err)
	}
	n.raft = r
	n.view = r
	n.term.r.Store(r)
	n.admit = &admission{raft: r, log: c.Logger, self: rc.LocalID}
	// Over TLS, a connection whose certificate names a current member
	// ranks above a stranger's or a removed member's under the transport's
	// inbound cap.
	transport.SetMembership(c.Transport, n.admit.member)
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
	// A peer away for less than this is a restart or a group closing node
	// after node, not an outage worth a warning.
	raftlog.SetPeerGrace(rc.Logger, peerGrace(c))
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
	// Everything raft and raft-boltdb created is in place: make its names
	// durable before raft reads or writes a term (datadir.go).
	if err := syncDataDir(dir); err != nil {
		_ = store.Close()
		return nil, nil, nil, fmt.Errorf("election: sync data dir %s: %w", dir, err)
	}
	n.bolt = store
	return logs, store, durableSnapshots{FileSnapshotStore: snaps, dir: filepath.Join(dir, snapshotsDir)}, nil
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
	term  *termSource
}

// AppendEntriesPipeline is not offered: every AppendEntries response goes
// through AppendEntries, where its term is checked. (NewTCP's transport
// offers no pipeline either.)
func (t inboxTransport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

// Consumer returns the channel raft reads every RPC from.
func (t inboxTransport) Consumer() <-chan raft.RPC { return t.inbox }

// termSource reads raft's current term once raft runs, and keeps the
// terms the voters answered with.
type termSource struct {
	r    atomic.Pointer[raft.Raft]
	self raft.ServerID

	mu       sync.Mutex
	reported map[raft.ServerAddress]uint64 // the highest term each peer answered with
}

// responseTerm returns the term raft is to see in a response that carried
// term t, or an error if it is to see none. raft adopts a higher term from a
// vote or pre-vote response as it does from a request, and steps down on a
// higher term in an append or snapshot response, so a peer that answers
// with an impossible term would otherwise do what admission stops it from
// doing as a sender. The rules (termAdmissible in admission.go):
//
//   - a term inside the window from this node's current term passes;
//   - a term up to JumpLimit passes once a quorum of the other voters —
//     every other voter of a cluster of three — answered this node's own
//     RPCs (at the addresses its configuration has for them, over TLS the
//     certificates those servers' IDs name) with that term or a higher one.
//     A node that fell further behind than the window (RAFT-NOTES, "Big
//     honest jumps"; a node that was away while a peer raised the others'
//     terms window by window) catches up in its next pre-vote round. One
//     peer, however it lies, is no quorum;
//   - any other higher term is clamped to the highest term the window
//     admits (windowTop): raft sees that its term is stale, steps down or
//     moves up by at most the window, as one forged request could move it.
//     Refusing it instead left a node that a peer had pushed more than the
//     window ahead of the others out for good: its own RPCs were refused
//     as too high, and the leader never learned it was stale
//     (TestAttackNodeAhead, found by FuzzLiveCluster). Window by window,
//     one election each, the others reach it.
func (s *termSource) responseTerm(what string, target raft.ServerAddress, t uint64) (uint64, error) {
	r := s.r.Load()
	if r == nil {
		return t, nil
	}
	cur := r.CurrentTerm()
	if termAdmissible(t, cur, false) {
		return t, nil
	}
	if t <= JumpLimit && s.quorumReports(r, target, t) {
		return t, nil
	}
	if top, ok := windowTop(cur); ok {
		return top, nil
	}
	return 0, fmt.Errorf("%w: %s response from %s carries term %d, outside the window from current term %d", ErrRefused, what, target, t, cur)
}

// quorumReports records that target answered with term t and reports
// whether a quorum of the other voters has answered with t or more.
func (s *termSource) quorumReports(r *raft.Raft, target raft.ServerAddress, t uint64) bool {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	var others []raft.ServerAddress
	voter := false
	for _, sv := range f.Configuration().Servers {
		if sv.Suffrage != raft.Voter {
			continue
		}
		if sv.ID == s.self {
			voter = true
			continue
		}
		others = append(others, sv.Address)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reported == nil {
		s.reported = make(map[raft.ServerAddress]uint64)
	}
	if slices.Contains(others, target) {
		s.reported[target] = max(s.reported[target], t)
	}
	n := len(others)
	if voter {
		n++
	}
	need := min(n/2+1, len(others))
	got := 0
	for _, a := range others {
		if s.reported[a] >= t {
			got++
		}
	}
	return need > 0 && got >= need
}

// AppendEntries implements raft.Transport, checking the response's term.
func (t inboxTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if err := t.Transport.AppendEntries(id, target, args, resp); err != nil {
		return err
	}
	term, err := t.term.responseTerm("AppendEntries", target, resp.Term)
	resp.Term = term
	return err
}

// RequestVote implements raft.Transport, checking the response's term.
func (t inboxTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if err := t.Transport.RequestVote(id, target, args, resp); err != nil {
		return err
	}
	term, err := t.term.responseTerm("RequestVote", target, resp.Term)
	resp.Term = term
	return err
}

// RequestPreVote implements raft.WithPreVote, checking the response's term.
func (t inboxTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if err := t.Transport.RequestPreVote(id, target, args, resp); err != nil {
		return err
	}
	term, err := t.term.responseTerm("RequestPreVote", target, resp.Term)
	resp.Term = term
	return err
}

// InstallSnapshot implements raft.Transport, checking the response's term.
func (t inboxTransport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	if err := t.Transport.InstallSnapshot(id, target, args, resp, data); err != nil {
		return err
	}
	term, err := t.term.responseTerm("InstallSnapshot", target, resp.Term)
	resp.Term = term
	return err
}

// forward hands raft each RPC the transport receives on in that the
// admission layer lets through (admission.go), until stop is closed; it
// answers the others itself. It holds at most one RPC, so raft's
// back-pressure on the transport is unchanged; an RPC it holds when stop
// closes is answered by the transport's own shutdown.
func (n *raftNode) forward(in <-chan raft.RPC, stop <-chan struct{}) {
	for {
		select {
		case rpc := <-in:
			if n.intercept != nil && isRenewal(rpc) {
				// A role renewal (a RequestPreVote with term 0, which raft
				// never sends) is taken out before admission and raft, but
				// only from a member at its address; anything else claiming
				// to be one is refused like any other invalid RPC.
				if err := n.admit.renewal(rpc); err != nil {
					n.admit.refuse(err)
					rpc.Respond(nil, err)
					continue
				}
				if n.intercept(rpc) {
					continue
				}
			}
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

// peerGrace is how long a peer must have been unreachable before the
// leader warns about it: ten election timeouts (10 s at raft's defaults).
func peerGrace(c Config) time.Duration { return 10 * c.ElectionTimeout }
