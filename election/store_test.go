package election

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/transport"
)

func single(t *testing.T, dir string, fsm raft.FSM) (*Election, error) {
	t.Helper()
	tr := transport.NewInmem("solo")
	el, err := New(Config{
		ID: "solo", Cluster: testCluster, DataDir: dir, InMemory: dir == "",
		Transport: tr, Bootstrap: []Server{{"solo", "solo"}},
		HeartbeatTimeout: testHT, ElectionTimeout: testET, LeaderLeaseTimeout: testLLT,
		FSM: fsm, Logger: newChecker(testCluster).logger("solo"),
	})
	if err != nil {
		_ = tr.Close()
	}
	return el, err
}

func TestDataDirLocked(t *testing.T) {
	dir := t.TempDir()
	first, err := single(t, dir, nil)
	if err != nil {
		t.Fatalf("first New: %v", err)
	}
	_, err = single(t, dir, nil)
	if !errors.Is(err, ErrDataDirLocked) {
		t.Fatalf("second New on the same DataDir: %v, want ErrDataDirLocked", err)
	}
	ep := waitEpoch(t, first)
	if err := first.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// Once released, the dir opens again, with the term it had.
	again, err := single(t, dir, nil)
	if err != nil {
		t.Fatalf("New after Close: %v", err)
	}
	defer again.Close()
	if ep2 := waitEpoch(t, again); ep2.Term <= ep.Term {
		t.Fatalf("after restart the epoch is %v, before it was %v", ep2, ep)
	}
}

func waitEpoch(t *testing.T, el *Election) epoch.Epoch {
	t.Helper()
	l, err := el.WaitLeader(ctxTimeout(t))
	if err != nil || !l.Leading() {
		t.Fatalf("WaitLeader: %+v, %v", l, err)
	}
	return l.Epoch
}

func ctxTimeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	t.Cleanup(cancel)
	return ctx
}

// countFSM records the data of every entry applied to it.
type countFSM struct {
	mu      sync.Mutex
	applied []string
}

func (f *countFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = append(f.applied, string(l.Data))
	return len(f.applied)
}

func (f *countFSM) Snapshot() (raft.FSMSnapshot, error) { return nopSnapshot{}, nil }
func (f *countFSM) Restore(rc io.ReadCloser) error      { return rc.Close() }

func TestFSMGetsOnlyApplicationEntries(t *testing.T) {
	fsm := &countFSM{}
	el, err := single(t, t.TempDir(), fsm)
	if err != nil {
		t.Fatal(err)
	}
	defer el.Close()
	waitEpoch(t, el)
	// Leadership changes issue barriers and no-ops; none may reach the FSM.
	for _, s := range []string{"a", "b", "c"} {
		if err := el.Raft().Apply([]byte(s), time.Second).Error(); err != nil {
			t.Fatalf("Apply(%s): %v", s, err)
		}
	}
	fsm.mu.Lock()
	defer fsm.mu.Unlock()
	if len(fsm.applied) != 3 || fsm.applied[0] != "a" || fsm.applied[2] != "c" {
		t.Fatalf("FSM saw %q, want [a b c]", fsm.applied)
	}
}

func TestSingleNodeResignFails(t *testing.T) {
	el, err := single(t, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer el.Close()
	ep := waitEpoch(t, el)
	if err := el.Resign(context.Background()); !errors.Is(err, ErrTransfer) {
		t.Fatalf("Resign with no other voter: %v, want ErrTransfer", err)
	}
	if got, err := el.Epoch(); err != nil || got != ep {
		t.Fatalf("Epoch after a failed Resign: %v, %v; want %v", got, err, ep)
	}
	tok, err := el.Token()
	if err != nil || tok != ep.String() {
		t.Fatalf("Token: %q, %v; want the plain text form %q", tok, err, ep.String())
	}
}

// hbRecorder records whether raft installed a heartbeat handler on it.
type hbRecorder struct {
	transport.Transport
	installed atomic.Bool
}

func (h *hbRecorder) SetHeartbeatHandler(func(raft.RPC)) { h.installed.Store(true) }

// TestNoHeartbeatFastPath: whatever transport the caller passes — a raw
// raft.NetworkTransport, which has the fast path and satisfies
// transport.Transport too, or one of package transport's — raft never gets
// to install its heartbeat fast path on it (invariant I2 in
// docs/DESIGN.md): New hands raft the transport through
// transport.MainLoopOnly. The control shows raft does install a handler on
// a transport it is given directly.
func TestNoHeartbeatFastPath(t *testing.T) {
	rawNT := func(t *testing.T) transport.Transport {
		nt, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 1, time.Second, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		return nt
	}
	for _, tc := range []struct {
		name  string
		inner func(t *testing.T) transport.Transport
	}{
		{"raw NetworkTransport", rawNT},
		{"NewInmem", func(*testing.T) transport.Transport { return transport.NewInmem("solo") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &hbRecorder{Transport: tc.inner(t)}
			addr := string(rec.LocalAddr())
			el, err := New(Config{ID: "solo", Cluster: testCluster, InMemory: true, Transport: rec,
				Bootstrap: []Server{{"solo", addr}}, Logger: newChecker(testCluster).logger("solo"),
				HeartbeatTimeout: testHT, ElectionTimeout: testET, LeaderLeaseTimeout: testLLT})
			if err != nil {
				_ = rec.Close()
				t.Fatal(err)
			}
			defer el.Close()
			if rec.installed.Load() {
				t.Fatal("raft installed a heartbeat handler on the transport")
			}
			waitEpoch(t, el) // and the node still elects itself
		})
	}
	t.Run("control: raft.NewRaft installs one", func(t *testing.T) {
		rec := &hbRecorder{Transport: rawNT(t)}
		rc := raft.DefaultConfig()
		rc.LocalID = "solo"
		rc.Logger = hclog.NewNullLogger()
		store := raft.NewInmemStore()
		r, err := raft.NewRaft(rc, nopFSM{}, store, store, raft.NewInmemSnapshotStore(), rec)
		if err != nil {
			_ = rec.Close()
			t.Fatal(err)
		}
		if err := r.Shutdown().Error(); err != nil {
			t.Fatal(err)
		}
		if !rec.installed.Load() {
			t.Fatal("raft.NewRaft did not call SetHeartbeatHandler: the test above proves nothing")
		}
	})
}

func TestLeadNilFn(t *testing.T) {
	el, err := single(t, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer el.Close()
	if err := el.Lead(context.Background(), nil); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Lead(nil): %v, want ErrInvalidArgument", err)
	}
}
