package transport

import (
	"context"

	"github.com/hashicorp/raft"
)

// MainLoopOnly returns t with raft's heartbeat fast path switched off: its
// SetHeartbeatHandler does nothing and passes nothing on, so raft receives
// every RPC, heartbeats included, on Consumer() and handles it on its main
// goroutine. Every other method is t's own (Close and RequestPreVote
// included, so pre-vote stays on).
//
// Why: hashicorp/raft's NetworkTransport runs the heartbeat handler raft
// installs on a connection goroutine, and that handler changes the node's
// state and term off raft's main goroutine (hashicorp/raft#695, open in
// v1.7.2 and later). termfence's epoch triple read — CurrentTerm,
// State == Leader, CurrentTerm — is sound only if raft changes its term and
// state on its main goroutine (invariant I2 in docs/DESIGN.md): with the fast
// path a node can become Leader in a term it did not win. The cost:
// heartbeats wait behind raft's main-loop disk writes, so keep
// LeaderLeaseTimeout well above an fsync.
//
// MainLoopOnly is the one place this rule lives. NewTCP, NewInmem and
// NewFaulty hand raft's SetHeartbeatHandler call to it, and election.New
// applies it to whatever Transport it is given, since a raw
// *raft.NetworkTransport satisfies Transport too. Wrapping twice changes
// nothing: a t that MainLoopOnly returned is returned as it is. A nil t gives
// nil.
func MainLoopOnly(t Transport) Transport {
	switch t := t.(type) {
	case nil:
		return nil
	case mainLoopOnly:
		return t
	default:
		return mainLoopOnly{Transport: t}
	}
}

// mainLoopOnly is the Transport MainLoopOnly returns.
type mainLoopOnly struct{ Transport }

// SetHeartbeatHandler ignores cb and does not pass it on (see MainLoopOnly).
func (mainLoopOnly) SetHeartbeatHandler(func(raft.RPC)) {}

// Probe implements Prober by asking the wrapped transport; one that cannot
// probe gives ErrCannotProbe.
func (m mainLoopOnly) Probe(ctx context.Context, addr raft.ServerAddress) error {
	if p, ok := m.Transport.(Prober); ok {
		return p.Probe(ctx, addr)
	}
	return ErrCannotProbe
}
