package main

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"go.uber.org/goleak"

	"github.com/termfence/termfence/election"
	"github.com/termfence/termfence/transport"

	"github.com/termfence/termfence/internal/testwait"
)

// TestMain checks for leaked goroutines, except the control node's
// connection handlers (raft's NetworkTransport does not wait for them on
// Close; each ends when forge's side of its connection is closed, which
// under load can come after the check).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/hashicorp/raft.(*NetworkTransport).handleConn"))
}

// TestForgeIsRefused runs forge against a three-node termfence cluster on
// loopback: every forged RPC is refused, and no node's term moves. The
// control: against a raw hashicorp/raft node (no admission layer) forge
// reports accepted RPCs and exits 1.
func TestForgeIsRefused(t *testing.T) {
	var trs []transport.Transport
	var boot []election.Server
	for i := range 3 {
		tr, err := transport.NewTCP("127.0.0.1:0", "", transport.Config{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		trs = append(trs, tr)
		boot = append(boot, election.Server{ID: fmt.Sprintf("n%d", i+1), Addr: string(tr.LocalAddr())})
	}
	var els []*election.Election
	for i, tr := range trs {
		el, err := election.New(election.Config{
			ID: boot[i].ID, Cluster: "forge", InMemory: true, Transport: tr, Bootstrap: boot,
			HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond, LeaderLeaseTimeout: 100 * time.Millisecond,
			Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		els = append(els, el)
		defer el.Close()
	}
	var term uint64
	deadline := time.Now().Add(testwait.Bound(10 * time.Second))
	for term == 0 {
		for _, el := range els {
			if ep, err := el.Epoch(); err == nil {
				term = ep.Term
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
		time.Sleep(5 * time.Millisecond) // poll interval
	}
	var targets, members []string
	for _, s := range boot {
		targets = append(targets, s.Addr)
		members = append(members, s.ID+"="+s.Addr)
	}
	var out bytes.Buffer
	code := run([]string{"-targets", strings.Join(targets, ","), "-members", strings.Join(members, ",")}, &out)
	if code != 0 {
		t.Fatalf("forge exit %d:\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "accepted=0") {
		t.Fatalf("output:\n%s", out.String())
	}
	for i, el := range els {
		if got := el.Raft().CurrentTerm(); got > term+2 { // a load-induced election or two is possible, a forged term is not
			t.Errorf("%s: term %d after forge (was %d)", boot[i].ID, got, term)
		}
	}

	// Control: a node without an admission layer that answers every RPC
	// without an error (a raw raft node would take them too, and crash on
	// the nil entries).
	raw, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 1, time.Second, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case rpc := <-raw.Consumer():
				if rpc.Reader != nil {
					_, _ = io.Copy(io.Discard, rpc.Reader)
				}
				rpc.Respond(nil, nil)
			case <-stop:
				return
			}
		}
	}()
	defer func() { close(stop); <-done }()
	out.Reset()
	if code := run([]string{"-targets", string(raw.LocalAddr()), "-named=false", "-count", "5", "-seed", "1"}, &out); code != 1 {
		t.Fatalf("forge against raw raft: exit %d, want 1:\n%s", code, out.String())
	}
	if usage := run(nil, &out); usage != 2 {
		t.Errorf("no -targets: exit %d, want 2", usage)
	}
}
