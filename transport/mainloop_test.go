package transport

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// sendHeartbeat sends a heartbeat-shaped AppendEntries from a to b while b
// has a heartbeat handler installed (as raft.NewRaft installs its own), and
// reports whether the handler ran and whether the RPC arrived on b's
// Consumer() instead.
func sendHeartbeat(t *testing.T, a, b raft.Transport) (handlerCalls int32, viaConsumer bool) {
	t.Helper()
	var calls atomic.Int32
	b.SetHeartbeatHandler(func(rpc raft.RPC) {
		calls.Add(1)
		rpc.Respond(&raft.AppendEntriesResponse{Term: 7, Success: true}, nil)
	})
	got := make(chan raft.RPC, 1)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case rpc := <-b.Consumer():
			rpc.Respond(&raft.AppendEntriesResponse{Term: 7, Success: true}, nil)
			got <- rpc
		case <-stop:
		}
	}()
	var resp raft.AppendEntriesResponse
	err := a.AppendEntries("b", b.LocalAddr(), heartbeat(a.LocalAddr(), 7), &resp)
	close(stop)
	<-done
	if err != nil {
		t.Fatalf("AppendEntries: %v", err)
	}
	if !resp.Success || resp.Term != 7 {
		t.Fatalf("response = %+v, want success in term 7", resp)
	}
	select {
	case rpc := <-got:
		req, ok := rpc.Command.(*raft.AppendEntriesRequest)
		if !ok || req.Term != 7 || len(req.Entries) != 0 {
			t.Fatalf("consumer got %#v, want the heartbeat", rpc.Command)
		}
		viaConsumer = true
	default:
	}
	return calls.Load(), viaConsumer
}

// newRawNT returns an unwrapped raft.NetworkTransport on loopback: it runs
// the heartbeat fast path whenever a handler is installed.
func newRawNT(t *testing.T) *raft.NetworkTransport {
	t.Helper()
	raw, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 1, time.Second, quietHCLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	return raw
}

func newTestFaulty(t *testing.T, inner Transport) *Faulty {
	t.Helper()
	f := NewFaulty(inner)
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// connectedInmem returns two connected Inmem transports.
func connectedInmem() (a, b *Inmem) {
	a, b = NewInmem(""), NewInmem("")
	a.Connect(b)
	return a, b
}

// TestNoHeartbeatFastPath proves invariant I2 (docs/DESIGN.md) for every way
// this package builds a Transport: after SetHeartbeatHandler — which
// raft.NewRaft calls with its fast-path handler — a heartbeat never runs the
// handler and arrives on Consumer(), for raft's main goroutine. Each case
// builds a receiver and a sender that can reach it.
func TestNoHeartbeatFastPath(t *testing.T) {
	ca := newCA(t, "cluster")
	tlsTCP := func(t *testing.T, name string) Transport {
		return newTestTCP(t, Config{TLS: ca.mutual(t, name)})
	}
	for _, tc := range []struct {
		name  string
		build func(t *testing.T) (recv, send raft.Transport)
	}{
		{"NewTCP", func(t *testing.T) (raft.Transport, raft.Transport) {
			return newTestTCP(t, Config{}), newTestTCP(t, Config{})
		}},
		{"NewTCP with TLS", func(t *testing.T) (raft.Transport, raft.Transport) {
			return tlsTCP(t, "b"), tlsTCP(t, "sender")
		}},
		{"NewInmem", func(t *testing.T) (raft.Transport, raft.Transport) {
			a, b := connectedInmem()
			return b, a
		}},
		{"NewFaulty(NewTCP)", func(t *testing.T) (raft.Transport, raft.Transport) {
			return newTestFaulty(t, newTestTCP(t, Config{})), newTestTCP(t, Config{})
		}},
		{"NewFaulty(NewTCP with TLS)", func(t *testing.T) (raft.Transport, raft.Transport) {
			return newTestFaulty(t, tlsTCP(t, "b")), tlsTCP(t, "sender")
		}},
		{"NewFaulty(NewInmem)", func(t *testing.T) (raft.Transport, raft.Transport) {
			a, b := connectedInmem()
			return newTestFaulty(t, b), a
		}},
		{"NewFaulty(raw NetworkTransport)", func(t *testing.T) (raft.Transport, raft.Transport) {
			return newTestFaulty(t, newRawNT(t)), newTestTCP(t, Config{})
		}},
		{"MainLoopOnly(raw NetworkTransport)", func(t *testing.T) (raft.Transport, raft.Transport) {
			return MainLoopOnly(newRawNT(t)), newTestTCP(t, Config{})
		}},
		{"MainLoopOnly(MainLoopOnly(raw NetworkTransport))", func(t *testing.T) (raft.Transport, raft.Transport) {
			return MainLoopOnly(MainLoopOnly(newRawNT(t))), newTestTCP(t, Config{})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recv, send := tc.build(t)
			calls, viaConsumer := sendHeartbeat(t, send, recv)
			if calls != 0 {
				t.Fatalf("heartbeat handler called %d times: the fast path is on", calls)
			}
			if !viaConsumer {
				t.Fatal("heartbeat did not arrive on Consumer()")
			}
		})
	}
}

// TestRawNetworkTransportUsesFastPath is the control for the test above: the
// same heartbeat sent to an unwrapped raft.NetworkTransport takes the fast
// path, so the request really is heartbeat-shaped.
func TestRawNetworkTransportUsesFastPath(t *testing.T) {
	calls, viaConsumer := sendHeartbeat(t, newTestTCP(t, Config{}), newRawNT(t))
	if calls != 1 || viaConsumer {
		t.Fatalf("raw transport: handler calls %d, via consumer %v; want 1, false", calls, viaConsumer)
	}
}

// hbRecorder is a Transport that records whether SetHeartbeatHandler
// reached it.
type hbRecorder struct {
	Transport
	installed atomic.Bool
}

func (h *hbRecorder) SetHeartbeatHandler(func(raft.RPC)) { h.installed.Store(true) }

func isMainLoopOnly(t Transport) bool {
	_, ok := t.(mainLoopOnly)
	return ok
}

// TestHeartbeatHandlerStopsAtMainLoopOnly: SetHeartbeatHandler never
// reaches the transport underneath a wrapper of this package. This covers
// what TestNoHeartbeatFastPath cannot see for Inmem, whose
// raft.InmemTransport ignores handlers anyway: NewInmem must still route
// the call through MainLoopOnly, in case raft's in-memory transport ever
// grows a fast path.
func TestHeartbeatHandlerStopsAtMainLoopOnly(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(Transport) Transport
	}{
		{"MainLoopOnly", MainLoopOnly},
		{"NewFaulty", func(in Transport) Transport { return newTestFaulty(t, in) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &hbRecorder{Transport: NewInmem("")}
			tc.wrap(rec).SetHeartbeatHandler(func(raft.RPC) {})
			if rec.installed.Load() {
				t.Fatal("the handler reached the wrapped transport")
			}
		})
	}
	t.Run("NewInmem", func(t *testing.T) {
		if in := NewInmem(""); !isMainLoopOnly(in.t) {
			t.Fatalf("NewInmem hands raft's calls to %T, not to MainLoopOnly", in.t)
		}
	})
	t.Run("nil", func(t *testing.T) {
		if MainLoopOnly(nil) != nil {
			t.Fatal("MainLoopOnly(nil) is not nil")
		}
	})
}
