package transport

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// stubHosts makes lookupHost answer from hosts (a name missing from it
// does not resolve) until the test ends, and counts the lookups.
func stubHosts(t *testing.T, hosts map[string][]string) *int {
	t.Helper()
	n := new(int)
	old := lookupHost
	lookupHost = func(_ context.Context, host string) ([]net.IPAddr, error) {
		*n++
		ips, ok := hosts[host]
		if !ok {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		var out []net.IPAddr
		for _, ip := range ips {
			out = append(out, net.IPAddr{IP: net.ParseIP(ip)})
		}
		return out, nil
	}
	t.Cleanup(func() { lookupHost = old })
	return n
}

// TestHostNameClaims: over plain TCP a claimed host name must resolve to
// the connection's source IP. On c3e6887 a host name was not compared at
// all: any source could claim a member that advertises one.
func TestHostNameClaims(t *testing.T) {
	stubHosts(t, map[string][]string{
		"node1.test": {"10.0.0.2", "fd00::2"},
		"node2.test": {"10.0.0.9"},
		"local.test": {"127.0.0.1"},
	})
	from := func(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000} }
	for _, c := range []struct {
		claimed, remote string
		ok              bool
	}{
		{"node1.test:7000", "10.0.0.2", true},
		{"node1.test:7000", "fd00::2", true},
		{"node2.test:7000", "10.0.0.2", false}, // resolves elsewhere
		{"nowhere.test:7000", "10.0.0.2", false},
		{"local.test:7000", "127.0.0.5", true}, // loopback matches loopback
		{"local.test:7000", "10.0.0.2", false},
	} {
		err := addrMatches(c.claimed, from(c.remote))
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrIdentityMismatch)) {
			t.Errorf("claim %s from %s: %v, want ok %v", c.claimed, c.remote, err, c.ok)
		}
	}
}

// TestHostNameClaimLive: a raw raft peer on loopback claims an address
// whose name resolves to another IP: refused and counted as ClaimRefused;
// the same peer claiming a name that resolves to loopback is answered, and
// its connection resolves the name once, not once per RPC.
func TestHostNameClaimLive(t *testing.T) {
	lookups := stubHosts(t, map[string][]string{"far.test": {"10.0.0.9"}, "near.test": {"127.0.0.1"}})
	tr := newTestTCP(t, Config{})
	serve(t, tr, func(rpc raft.RPC) { rpc.Respond(&raft.RequestPreVoteResponse{Term: 1}, nil) })
	peer, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 5*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	preVote := func(claim string) error {
		return peer.RequestPreVote("x", tr.LocalAddr(), &raft.RequestPreVoteRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("x"), Addr: []byte(claim)}, Term: 1,
		}, &raft.RequestPreVoteResponse{})
	}
	if err := preVote("far.test:7000"); err == nil {
		t.Fatal("a claim of far.test from loopback was answered")
	}
	if s, _ := Inbound(tr); s.ClaimRefused != 1 {
		t.Fatalf("ClaimRefused %d, want 1", s.ClaimRefused)
	}
	before := *lookups
	for range 3 {
		if err := preVote("near.test:7000"); err != nil {
			t.Fatalf("a claim of near.test from loopback: %v", err)
		}
	}
	if n := *lookups - before; n != 1 {
		t.Errorf("%d lookups for 3 RPCs on one connection, want 1", n)
	}
}
