package electionmetrics_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/termfence/termfence/election"
	"github.com/termfence/termfence/election/electionmetrics"
	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/fencemetrics"
	"github.com/termfence/termfence/transport"

	"github.com/termfence/termfence/internal/testwait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// raftReg receives raft's go-metrics (RegisterRaft).
var raftReg = prometheus.NewRegistry()

type member struct {
	id  string
	net *transport.Faulty
	el  *election.Election
	reg *prometheus.Registry
}

// gather returns the metric family name of reg, failing if absent.
func family(t *testing.T, reg prometheus.Gatherer, name string) *dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	t.Fatalf("no %s in the registry", name)
	return nil
}

// value returns the value of the series of family name whose labels
// include want (label=value pairs).
func value(t *testing.T, reg prometheus.Gatherer, name string, want ...string) float64 {
	t.Helper()
	mf := family(t, reg, name)
outer:
	for _, m := range mf.GetMetric() {
		for i := 0; i+1 < len(want); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == want[i] && lp.GetValue() == want[i+1] {
					found = true
				}
			}
			if !found {
				continue outer
			}
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	t.Fatalf("no series %s%v", name, want)
	return 0
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testwait.Bound(10 * time.Second))
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond) // poll interval
	}
}

// TestScrapeAcrossFailover: a three-node in-process cluster, each node's
// collector in a registry of its own and raft's go-metrics bridged into
// another, and a fence wrapped by fencemetrics behind a Guard. Scraped
// before and after the leader is cut off (transport.Faulty): the leader
// gauge moves from the old leader to the new one, the old leader counts a
// withdrawn epoch and the new one a confirmed one with its win→confirmed
// latency in the histogram, time without a leader is counted, the fence
// counts the raises and each refusal by its reason (stale, bad signature,
// malformed, foreign), raft's own metrics are there, and every registry
// passes client_golang's lint.
func TestScrapeAcrossFailover(t *testing.T) {
	// go-metrics has one global sink per process: bridged once, for every
	// run of this test (-count).
	if err := electionmetrics.RegisterRaft(raftReg); err != nil && !errors.Is(err, electionmetrics.ErrRaftBridged) {
		t.Fatalf("RegisterRaft: %v", err)
	}
	if err := electionmetrics.RegisterRaft(prometheus.NewRegistry()); !errors.Is(err, electionmetrics.ErrRaftBridged) {
		t.Fatalf("second RegisterRaft: %v, want ErrRaftBridged", err)
	}

	ids := []string{"m1", "m2", "m3"}
	mems := make([]*transport.Inmem, len(ids))
	var boot []election.Server
	for i, id := range ids {
		mems[i] = transport.NewInmem(id)
		boot = append(boot, election.Server{ID: id, Addr: id})
	}
	for i := range mems {
		for j := range mems {
			if i != j {
				mems[i].Connect(mems[j])
			}
		}
	}
	var nodes []*member
	for i, id := range ids {
		m := &member{id: id, net: transport.NewFaulty(mems[i]), reg: prometheus.NewRegistry()}
		el, err := election.New(election.Config{
			ID: id, Cluster: "metrics", InMemory: true, Transport: m.net, Bootstrap: boot,
			HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond, LeaderLeaseTimeout: 50 * time.Millisecond,
			Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		m.el = el
		electionmetrics.MustRegister(m.reg, el)
		nodes = append(nodes, m)
	}
	t.Cleanup(func() {
		// Cut every link first: a closing leader's handover to a node
		// already closed would otherwise wait out the in-memory
		// transport's timeout.
		for _, mem := range mems {
			mem.DisconnectAll()
		}
		for _, m := range nodes {
			_ = m.el.Close()
		}
	})
	leader := func(except *member) (*member, epoch.Epoch) {
		var ld *member
		var ep epoch.Epoch
		waitFor(t, "a leader", func() bool {
			for _, m := range nodes {
				if e, err := m.el.Epoch(); err == nil && m != except {
					ld, ep = m, e
					return true
				}
			}
			return false
		})
		return ld, ep
	}
	old, ep1 := leader(nil)
	if v := value(t, old.reg, "termfence_election_leader"); v != 1 {
		t.Fatalf("leader gauge on the leader %s: %v", old.id, v)
	}
	if v := value(t, old.reg, "termfence_election_epoch_transitions_total", "transition", "confirmed"); v < 1 {
		t.Fatalf("confirmed epochs on the leader: %v", v)
	}
	if v := value(t, old.reg, "termfence_election_confirm_duration_seconds"); v < 1 {
		t.Fatalf("confirm latency observations on the leader: %v", v)
	}
	if v := value(t, old.reg, "termfence_election_term"); v != float64(ep1.Term) {
		t.Fatalf("term gauge %v, epoch %v", v, ep1)
	}

	// The fence, behind a Guard that verifies HMAC tokens.
	key := []byte("0123456789abcdef0123456789abcdef")
	codec, err := epoch.NewHMAC(key)
	if err != nil {
		t.Fatal(err)
	}
	fenceReg := prometheus.NewRegistry()
	fm := fencemetrics.MustNew(fenceReg)
	fence := fm.Wrap(storageguard.NewMemory())
	guard := storageguard.NewGuard(fence, storageguard.GuardConfig{Cluster: "metrics", Verifier: codec, OnRefuse: fm.Refused})
	ctx := context.Background()
	write := func(ep epoch.Epoch) error {
		tok, err := codec.Sign(ep)
		if err != nil {
			t.Fatal(err)
		}
		return guard.Do(ctx, "orders", tok, func(context.Context, epoch.Epoch) error { return nil })
	}
	if err := write(ep1); err != nil {
		t.Fatalf("write under %v: %v", ep1, err)
	}

	// Failover: the leader is cut off from everyone.
	old.net.Isolate()
	nw, ep2 := leader(old)
	waitFor(t, "the old leader to step down", func() bool {
		_, err := old.el.Epoch()
		return err != nil
	})
	old.net.Heal()
	waitFor(t, "the leader gauge to move", func() bool {
		return value(t, old.reg, "termfence_election_leader") == 0 && value(t, nw.reg, "termfence_election_leader") == 1
	})
	if v := value(t, old.reg, "termfence_election_epoch_transitions_total", "transition", "withdrawn"); v < 1 {
		t.Errorf("withdrawn epochs on the old leader: %v", v)
	}
	if v := value(t, nw.reg, "termfence_election_confirm_duration_seconds"); v < 1 {
		t.Errorf("confirm latency observations on the new leader: %v", v)
	}
	if v := value(t, nw.reg, "termfence_election_epoch_transitions_total", "transition", "confirmed"); v < 1 {
		t.Errorf("confirmed epochs on the new leader: %v", v)
	}
	if v := value(t, old.reg, "termfence_election_leaderless_seconds_total"); v <= 0 {
		t.Errorf("the cut-off old leader counted no time without a leader: %v", v)
	}

	// The new leader writes; the old epoch, a forged, a malformed and a
	// foreign token are refused, each counted by its reason.
	if err := write(ep2); err != nil {
		t.Fatalf("write under %v: %v", ep2, err)
	}
	if err := write(ep1); !errors.Is(err, storageguard.ErrStale) {
		t.Fatalf("old epoch: %v", err)
	}
	forged, _ := epoch.NewHMAC([]byte("another key, another key, another"))
	tok, _ := forged.Sign(epoch.Epoch{Cluster: "metrics", Term: ep2.Term + 1, Leader: "mallory"})
	if err := guard.Do(ctx, "orders", tok, func(context.Context, epoch.Epoch) error { return nil }); !errors.Is(err, storageguard.ErrUnauthenticated) {
		t.Fatalf("forged token: %v", err)
	}
	if err := guard.Do(ctx, "orders", "tf1:garbage", func(context.Context, epoch.Epoch) error { return nil }); err == nil {
		t.Fatal("malformed token admitted")
	}
	if err := write(epoch.Epoch{Cluster: "other", Term: ep2.Term, Leader: nw.id}); !errors.Is(err, storageguard.ErrForeignCluster) {
		t.Fatalf("foreign token: %v", err)
	}
	for _, c := range []struct {
		op, result string
		want       float64
	}{
		{"do", "admitted", 2}, {"do", "stale", 1}, {"guard", "bad_signature", 1}, {"guard", "malformed", 1}, {"guard", "foreign", 1},
	} {
		if v := value(t, fenceReg, "termfence_fence_decisions_total", "op", c.op, "result", c.result); v != c.want {
			t.Errorf("decisions{op=%s,result=%s} = %v, want %v", c.op, c.result, v, c.want)
		}
	}
	if v := value(t, fenceReg, "termfence_fence_raises_total"); v != 2 {
		t.Errorf("raises = %v, want 2", v)
	}
	if v := value(t, fenceReg, "termfence_fence_hold_seconds"); v != 2 {
		t.Errorf("hold time observations = %v, want 2", v)
	}

	// A stranger's vote request with a term no real cluster reaches is
	// refused by m1's admission layer and counted by its reason.
	stranger := transport.NewInmem("stranger")
	defer stranger.Close()
	stranger.Connect(mems[0])
	var vresp raft.RequestVoteResponse
	_ = stranger.RequestVote("m1", "m1", &raft.RequestVoteRequest{
		RPCHeader: raft.RPCHeader{ID: []byte("stranger"), Addr: []byte("stranger")}, Term: 1 << 62,
	}, &vresp)
	if v := value(t, nodes[0].reg, "termfence_election_admission_refused_total", "reason", "term_too_high"); v < 1 {
		t.Errorf("admission refusals (term_too_high) on m1: %v", v)
	}

	// raft's own metrics arrive through the bridge.
	mfs, err := raftReg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var raftNames []string
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "raft_") {
			raftNames = append(raftNames, mf.GetName())
		}
	}
	if len(raftNames) == 0 {
		t.Errorf("no raft_ metric bridged; got %d families", len(mfs))
	}

	for name, reg := range map[string]prometheus.Gatherer{"node": nw.reg, "fence": fenceReg} {
		problems, err := testutil.GatherAndLint(reg)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("lint (%s registry): %s: %s", name, p.Metric, p.Text)
		}
	}

}

// TestInboundDrops: over a transport from NewTCP the Raft port's inbound
// connections are exported: a stranger that connects and sends nothing is
// accepted, then dropped when its handshake time runs out, and counted
// under reason="handshake_failed"; over an in-memory transport there are
// no transport metrics at all.
func TestInboundDrops(t *testing.T) {
	tr, err := transport.NewTCP("127.0.0.1:0", "", transport.Config{HandshakeTimeout: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	addr := string(tr.LocalAddr())
	el, err := election.New(election.Config{
		ID: "t1", Cluster: "metrics", InMemory: true, Transport: tr,
		Bootstrap: []election.Server{{ID: "t1", Addr: addr}}, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer el.Close()
	reg := prometheus.NewRegistry()
	electionmetrics.MustRegister(reg, el)
	if v := value(t, reg, "termfence_transport_inbound_dropped_total", "reason", "handshake_failed"); v != 0 {
		t.Fatalf("handshake_failed = %v before any connection", v)
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	deadline := time.Now().Add(testwait.Bound(30 * time.Second))
	for value(t, reg, "termfence_transport_inbound_dropped_total", "reason", "handshake_failed") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("a silent stranger's connection was never counted as a failed handshake")
		}
		time.Sleep(10 * time.Millisecond) // polling the counter, not waiting for it
	}
	if v := value(t, reg, "termfence_transport_inbound_accepted_total"); v < 1 {
		t.Fatalf("accepted = %v, want >= 1", v)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}

	mem := transport.NewInmem("i1")
	el2, err := election.New(election.Config{
		ID: "i1", Cluster: "metrics", InMemory: true, Transport: mem,
		Bootstrap: []election.Server{{ID: "i1", Addr: "i1"}}, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer el2.Close()
	reg2 := prometheus.NewRegistry()
	electionmetrics.MustRegister(reg2, el2)
	mfs, err := reg2.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "termfence_transport_") {
			t.Errorf("%s exported over the in-memory transport", mf.GetName())
		}
	}
}
