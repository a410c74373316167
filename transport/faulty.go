package transport

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
)

// Faulty wraps one node's Transport and injects network faults into it, so
// that tests can partition, slow down and lose RPCs of a live raft cluster —
// termfence's own tests and the tests of services built on it.
//
// Faults are set per node: wrap every node's transport in its own Faulty and
// give raft the Faulty. Then
//
//   - Isolate cuts the node off from everyone: every outbound RPC fails at
//     once with ErrPartitioned, every inbound RPC is answered with an error
//     instead of being delivered to raft.
//   - Cut(peers...) does the same for RPCs to and from the named peer
//     addresses only. The sender of an inbound RPC is taken from its
//     raft.RPCHeader.Addr, so a cut is bidirectional even when only one side
//     is wrapped.
//   - Refuse(peers...) is a firewall that rejects: RPCs to and from the
//     named peer addresses fail at once with an error wrapping
//     syscall.ECONNREFUSED, and so does Probe of those addresses — the
//     "connection refused" a process sees when nothing listens on a port or
//     a firewall rejects with a TCP reset, simulated in the transport.
//   - Heal undoes Isolate, every Cut and every Refuse (but not Delay or
//     Drop).
//   - Delay(d) makes each outbound RPC wait d before it is sent. Delay(0)
//     turns it off.
//   - Drop(p, seed) fails each outbound RPC with probability p, with
//     ErrDropped. Drop(0, 0) turns it off.
//
// A partition is checked when an RPC starts and again after its injected
// delay; an RPC already on the wire when a partition starts completes.
//
// Faulty never enables raft's heartbeat fast path, whatever it wraps: it
// wraps t in MainLoopOnly, so SetHeartbeatHandler never reaches t, and every
// inbound RPC passes the faults on its way to Consumer().
//
// AppendEntriesPipeline always returns raft.ErrPipelineReplicationNotSupported,
// so raft replicates with plain AppendEntries calls, each of which honours
// the faults. This costs replication throughput, which does not matter in
// tests, and keeps the faults exact.
//
// All methods are safe for concurrent use; faults may be changed while raft
// runs. Close stops Faulty's goroutine and closes the wrapped transport.
type Faulty struct {
	inner Transport
	out   chan raft.RPC
	done  chan struct{}
	wg    sync.WaitGroup

	closeOnce sync.Once
	closeErr  error

	mu       sync.Mutex
	isolated bool
	cut      map[raft.ServerAddress]struct{}
	refused  map[raft.ServerAddress]struct{}
	delay    time.Duration
	dropP    float64
	rng      *rand.Rand
}

// NewFaulty wraps t, with no fault set. The returned Faulty owns t: give the
// Faulty to raft, and Faulty.Close closes t.
func NewFaulty(t Transport) *Faulty {
	f := &Faulty{
		inner:   MainLoopOnly(t),
		out:     make(chan raft.RPC),
		done:    make(chan struct{}),
		cut:     make(map[raft.ServerAddress]struct{}),
		refused: make(map[raft.ServerAddress]struct{}),
	}
	f.wg.Add(1)
	go f.forward()
	return f
}

// Isolate drops every RPC to and from this node until Heal.
func (f *Faulty) Isolate() {
	f.mu.Lock()
	f.isolated = true
	f.mu.Unlock()
}

// Cut drops every RPC between this node and each of peers (their raft
// addresses) until Heal. Cuts accumulate over calls.
func (f *Faulty) Cut(peers ...raft.ServerAddress) {
	f.mu.Lock()
	for _, p := range peers {
		f.cut[p] = struct{}{}
	}
	f.mu.Unlock()
}

// Refuse rejects every RPC between this node and each of peers, and every
// Probe of them, with an error wrapping syscall.ECONNREFUSED, until Heal.
// Refusals accumulate over calls.
func (f *Faulty) Refuse(peers ...raft.ServerAddress) {
	f.mu.Lock()
	for _, p := range peers {
		f.refused[p] = struct{}{}
	}
	f.mu.Unlock()
}

// Heal undoes Isolate, every Cut and every Refuse. Delay and Drop stay as
// they are.
func (f *Faulty) Heal() {
	f.mu.Lock()
	f.isolated = false
	clear(f.cut)
	clear(f.refused)
	f.mu.Unlock()
}

// refusedErr is the error of a refused RPC or probe between a and b.
func refusedErr(a, b raft.ServerAddress) error {
	return fmt.Errorf("transport: %s -> %s: %w", a, b, syscall.ECONNREFUSED)
}

// isRefused reports whether peer is refused.
func (f *Faulty) isRefused(peer raft.ServerAddress) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.refused[peer]
	return ok
}

// Probe implements Prober: a refused peer gives an error wrapping
// syscall.ECONNREFUSED, any other address is probed by the wrapped
// transport (ErrCannotProbe for an in-memory one).
func (f *Faulty) Probe(ctx context.Context, addr raft.ServerAddress) error {
	if f.isRefused(addr) {
		return refusedErr(f.inner.LocalAddr(), addr)
	}
	return f.inner.(Prober).Probe(ctx, addr) // inner is a mainLoopOnly
}

// Delay makes every outbound RPC wait d before it is sent; d <= 0 removes the
// delay. Close interrupts a waiting RPC.
func (f *Faulty) Delay(d time.Duration) {
	f.mu.Lock()
	f.delay = max(d, 0)
	f.mu.Unlock()
}

// Drop makes every outbound RPC fail with ErrDropped with probability p,
// decided by a pseudo-random sequence seeded with seed: the same seed and the
// same order of calls give the same drops (with RPCs sent from several
// goroutines, which RPC gets which draw depends on their interleaving). p <= 0
// (or NaN) turns dropping off; p >= 1 drops everything. Only RPCs that are not
// partitioned and start while p > 0 draw from the sequence.
func (f *Faulty) Drop(p float64, seed int64) {
	if math.IsNaN(p) || p < 0 {
		p = 0
	}
	f.mu.Lock()
	f.dropP = min(p, 1)
	f.rng = rand.New(rand.NewSource(seed))
	f.mu.Unlock()
}

func (f *Faulty) partitioned(peer raft.ServerAddress) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.isolated {
		return true
	}
	_, ok := f.cut[peer]
	return ok
}

// outbound applies the faults to an RPC about to be sent to target. A nil
// result means: send it.
func (f *Faulty) outbound(target raft.ServerAddress) error {
	select {
	case <-f.done:
		return ErrClosed
	default:
	}
	f.mu.Lock()
	_, cut := f.cut[target]
	_, refused := f.refused[target]
	blocked := f.isolated || cut
	drop := !blocked && !refused && f.dropP > 0 && f.rng.Float64() < f.dropP
	delay := f.delay
	f.mu.Unlock()
	switch {
	case blocked:
		return fmt.Errorf("%w: %s -> %s", ErrPartitioned, f.inner.LocalAddr(), target)
	case refused:
		return refusedErr(f.inner.LocalAddr(), target)
	case drop:
		return fmt.Errorf("%w: %s -> %s", ErrDropped, f.inner.LocalAddr(), target)
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-f.done:
			t.Stop()
			return ErrClosed
		}
		if f.partitioned(target) {
			return fmt.Errorf("%w: %s -> %s", ErrPartitioned, f.inner.LocalAddr(), target)
		}
	}
	return nil
}

// forward moves inbound RPCs from the wrapped transport to Consumer(),
// answering those from a partitioned sender with an error instead.
func (f *Faulty) forward() {
	defer f.wg.Done()
	in := f.inner.Consumer()
	for {
		select {
		case <-f.done:
			return
		case rpc := <-in:
			// An RPC whose sender is unknown ("") still meets Isolate.
			if from := sender(rpc.Command); f.partitioned(from) {
				refuse(rpc, fmt.Errorf("%w: %s -> %s", ErrPartitioned, from, f.inner.LocalAddr()))
				continue
			} else if f.isRefused(from) {
				refuse(rpc, refusedErr(from, f.inner.LocalAddr()))
				continue
			}
			select {
			case f.out <- rpc:
			case <-f.done:
				refuse(rpc, ErrClosed)
				return
			}
		}
	}
}

// sender returns the address of the node that sent cmd, from its
// RPCHeader.Addr (raft fills it in every request it sends), or "" if cmd
// carries none.
func sender(cmd any) raft.ServerAddress {
	h, ok := cmd.(raft.WithRPCHeader)
	if !ok {
		return ""
	}
	return raft.ServerAddress(h.GetRPCHeader().Addr)
}

// refuse answers rpc with err and an empty response of the right type (some
// raft code paths read the response even when there is an error). A snapshot
// stream is drained first so the connection stays in step.
func refuse(rpc raft.RPC, err error) {
	if rpc.Reader != nil {
		_, _ = io.Copy(io.Discard, rpc.Reader)
	}
	var resp any
	switch rpc.Command.(type) {
	case *raft.AppendEntriesRequest:
		resp = &raft.AppendEntriesResponse{}
	case *raft.RequestVoteRequest:
		resp = &raft.RequestVoteResponse{}
	case *raft.RequestPreVoteRequest:
		resp = &raft.RequestPreVoteResponse{}
	case *raft.InstallSnapshotRequest:
		resp = &raft.InstallSnapshotResponse{}
	case *raft.TimeoutNowRequest:
		resp = &raft.TimeoutNowResponse{}
	}
	rpc.Respond(resp, err)
}

// Consumer implements raft.Transport: inbound RPCs that passed the faults.
func (f *Faulty) Consumer() <-chan raft.RPC { return f.out }

// LocalAddr implements raft.Transport.
func (f *Faulty) LocalAddr() raft.ServerAddress { return f.inner.LocalAddr() }

// AppendEntriesPipeline always returns raft.ErrPipelineReplicationNotSupported
// so that every AppendEntries goes through the fault checks.
func (f *Faulty) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

// AppendEntries implements raft.Transport, subject to the faults.
func (f *Faulty) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if err := f.outbound(target); err != nil {
		return err
	}
	return f.inner.AppendEntries(id, target, args, resp)
}

// RequestVote implements raft.Transport, subject to the faults.
func (f *Faulty) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if err := f.outbound(target); err != nil {
		return err
	}
	return f.inner.RequestVote(id, target, args, resp)
}

// RequestPreVote implements raft.WithPreVote, subject to the faults.
func (f *Faulty) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if err := f.outbound(target); err != nil {
		return err
	}
	return f.inner.RequestPreVote(id, target, args, resp)
}

// InstallSnapshot implements raft.Transport, subject to the faults.
func (f *Faulty) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	if err := f.outbound(target); err != nil {
		return err
	}
	return f.inner.InstallSnapshot(id, target, args, resp, data)
}

// TimeoutNow implements raft.Transport, subject to the faults.
func (f *Faulty) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	if err := f.outbound(target); err != nil {
		return err
	}
	return f.inner.TimeoutNow(id, target, args, resp)
}

// EncodePeer implements raft.Transport.
func (f *Faulty) EncodePeer(id raft.ServerID, addr raft.ServerAddress) []byte {
	return f.inner.EncodePeer(id, addr)
}

// DecodePeer implements raft.Transport.
func (f *Faulty) DecodePeer(buf []byte) raft.ServerAddress { return f.inner.DecodePeer(buf) }

// SetHeartbeatHandler implements raft.Transport. The wrapped transport is
// behind MainLoopOnly, which drops cb: heartbeats reach raft through
// Consumer(), on its main goroutine, after the faults.
func (f *Faulty) SetHeartbeatHandler(cb func(raft.RPC)) { f.inner.SetHeartbeatHandler(cb) }

// Close stops the goroutine that feeds Consumer(), waits for it, and closes
// the wrapped transport. Later calls return the first call's result.
func (f *Faulty) Close() error {
	f.closeOnce.Do(func() {
		close(f.done)
		f.wg.Wait()
		f.closeErr = f.inner.Close()
	})
	return f.closeErr
}
