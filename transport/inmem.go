package transport

import (
	"context"
	"io"

	"github.com/hashicorp/raft"
)

// Inmem is an in-process Transport for tests and single-process demos. It
// wraps raft.InmemTransport and adds bidirectional Connect and Disconnect.
// Nodes reach each other only once connected. Like every Transport of this
// package it never runs a heartbeat fast path (MainLoopOnly).
//
// Inmem is safe for concurrent use.
type Inmem struct {
	addr raft.ServerAddress
	raw  *raft.InmemTransport // for Connect and Disconnect
	t    Transport            // MainLoopOnly(raw): every raft.Transport call goes here
}

// NewInmem returns an unconnected in-memory transport whose address is addr.
// An empty addr gets a random unique address. Each RPC waits at most 500ms
// for the peer to take and answer it (raft.InmemTransport's default).
func NewInmem(addr string) *Inmem {
	a, raw := raft.NewInmemTransport(raft.ServerAddress(addr))
	return &Inmem{addr: a, raw: raw, t: MainLoopOnly(raw)}
}

// Connect lets i and peer send RPCs to each other.
func (i *Inmem) Connect(peer *Inmem) {
	i.raw.Connect(peer.addr, peer.raw)
	peer.raw.Connect(i.addr, i.raw)
}

// Disconnect stops RPCs between i and peer in both directions, closing any
// pipelines between them. Connect undoes it.
func (i *Inmem) Disconnect(peer *Inmem) {
	i.raw.Disconnect(peer.addr)
	peer.raw.Disconnect(i.addr)
}

// DisconnectAll stops RPCs from i to every peer. Peers can still send to i;
// use Disconnect for a bidirectional cut.
func (i *Inmem) DisconnectAll() { i.raw.DisconnectAll() }

// Consumer implements raft.Transport.
func (i *Inmem) Consumer() <-chan raft.RPC { return i.t.Consumer() }

// LocalAddr implements raft.Transport.
func (i *Inmem) LocalAddr() raft.ServerAddress { return i.addr }

// AppendEntriesPipeline implements raft.Transport.
func (i *Inmem) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	return i.t.AppendEntriesPipeline(id, target)
}

// AppendEntries implements raft.Transport.
func (i *Inmem) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	return i.t.AppendEntries(id, target, args, resp)
}

// RequestVote implements raft.Transport.
func (i *Inmem) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	return i.t.RequestVote(id, target, args, resp)
}

// RequestPreVote implements raft.WithPreVote.
func (i *Inmem) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return i.t.RequestPreVote(id, target, args, resp)
}

// InstallSnapshot implements raft.Transport.
func (i *Inmem) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	return i.t.InstallSnapshot(id, target, args, resp, data)
}

// EncodePeer implements raft.Transport.
func (i *Inmem) EncodePeer(id raft.ServerID, addr raft.ServerAddress) []byte {
	return i.t.EncodePeer(id, addr)
}

// DecodePeer implements raft.Transport.
func (i *Inmem) DecodePeer(buf []byte) raft.ServerAddress { return i.t.DecodePeer(buf) }

// SetHeartbeatHandler implements raft.Transport; MainLoopOnly drops cb, so
// heartbeats are delivered on Consumer().
func (i *Inmem) SetHeartbeatHandler(cb func(raft.RPC)) { i.t.SetHeartbeatHandler(cb) }

// TimeoutNow implements raft.Transport.
func (i *Inmem) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	return i.t.TimeoutNow(id, target, args, resp)
}

// Close disconnects i from all peers (outbound). It starts no goroutines, so
// there is nothing else to stop.
func (i *Inmem) Close() error { return i.t.Close() }

// Probe implements Prober: an in-memory transport has no connections to
// refuse, so it always returns ErrCannotProbe.
func (i *Inmem) Probe(context.Context, raft.ServerAddress) error { return ErrCannotProbe }
