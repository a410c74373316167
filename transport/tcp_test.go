package transport

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func newTestTCP(t *testing.T, cfg Config) Transport {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	tr, err := NewTCP("127.0.0.1:0", "", cfg)
	if err != nil {
		t.Fatalf("NewTCP: %v", err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// sendHeartbeat sends a heartbeat-shaped AppendEntries from a to b while b
// has a heartbeat handler installed, and reports whether the handler ran and
// whether the RPC arrived on b's Consumer() instead.
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

// TestTCPHeartbeatFastPathOff proves DESIGN.md I2 for NewTCP: a heartbeat
// handler is never called, and the heartbeat arrives on Consumer().
func TestTCPHeartbeatFastPathOff(t *testing.T) {
	a := newTestTCP(t, Config{})
	b := newTestTCP(t, Config{})
	calls, viaConsumer := sendHeartbeat(t, a, b)
	if calls != 0 {
		t.Fatalf("heartbeat handler called %d times; the fast path is on", calls)
	}
	if !viaConsumer {
		t.Fatal("heartbeat did not arrive on Consumer()")
	}
}

// TestRawNetworkTransportUsesFastPath is the control for the test above: the
// same heartbeat sent to an unwrapped raft.NetworkTransport takes the fast
// path, so the request really is heartbeat-shaped.
func TestRawNetworkTransportUsesFastPath(t *testing.T) {
	a := newTestTCP(t, Config{})
	raw, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 1, time.Second, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	calls, viaConsumer := sendHeartbeat(t, a, raw)
	if calls != 1 || viaConsumer {
		t.Fatalf("raw transport: handler calls %d, via consumer %v; want 1, false", calls, viaConsumer)
	}
}

func TestTCPClusterElects(t *testing.T) {
	nodes := startCluster(t, fast, newTestTCP(t, Config{}), newTestTCP(t, Config{}), newTestTCP(t, Config{}))
	leader, _ := waitLeader(t, nodes)
	if err := leader.r.Apply([]byte("x"), 5*time.Second).Error(); err != nil {
		t.Fatalf("apply: %v", err)
	}
}
