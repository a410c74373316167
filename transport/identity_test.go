package transport

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/internal/testwait"
)

// answer responds to every RPC tr receives, until the test ends, and
// returns the channel the answered RPCs are also sent on.
func answer(t *testing.T, tr raft.Transport) <-chan raft.RPC {
	t.Helper()
	got := make(chan raft.RPC, 64)
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		for {
			select {
			case rpc := <-tr.Consumer():
				rpc.Respond(&raft.AppendEntriesResponse{Term: 1, Success: true}, nil)
				select {
				case got <- rpc:
				default:
				}
			case <-done:
				return
			}
		}
	}()
	return got
}

func TestServerIDFromCertificate(t *testing.T) {
	uri := func(s string) *url.URL {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	tests := []struct {
		name string
		cert *x509.Certificate
		want string // "" for an error
	}{
		{"good", &x509.Certificate{URIs: []*url.URL{uri("urn:termfence:server:n1")}, ExtKeyUsage: both}, "n1"},
		{"any usage", &x509.Certificate{URIs: []*url.URL{uri("urn:termfence:server:n1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}, "n1"},
		{"other URIs ignored", &x509.Certificate{URIs: []*url.URL{uri("spiffe://x/y"), uri("urn:termfence:server:n1")}, ExtKeyUsage: both}, "n1"},
		{"nil", nil, ""},
		{"no URI", &x509.Certificate{ExtKeyUsage: both}, ""},
		{"two IDs", &x509.Certificate{URIs: []*url.URL{uri("urn:termfence:server:n1"), uri("urn:termfence:server:n2")}, ExtKeyUsage: both}, ""},
		{"empty ID", &x509.Certificate{URIs: []*url.URL{uri("urn:termfence:server:")}, ExtKeyUsage: both}, ""},
		{"bad ID", &x509.Certificate{URIs: []*url.URL{uri("urn:termfence:server:a:b")}, ExtKeyUsage: both}, ""},
		{"client-only", &x509.Certificate{URIs: []*url.URL{uri("urn:termfence:server:n1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, ""},
		{"server-only", &x509.Certificate{URIs: []*url.URL{uri("urn:termfence:server:n1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ""},
		{"no usages", &x509.Certificate{URIs: []*url.URL{uri("urn:termfence:server:n1")}}, ""},
	}
	for _, tc := range tests {
		got, err := ServerIDFromCertificate(tc.cert)
		if tc.want == "" {
			if !errors.Is(err, ErrNoIdentity) {
				t.Errorf("%s: = %q, %v; want ErrNoIdentity", tc.name, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: = %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
	if u, err := ServerIDURI("n1"); err != nil || u.String() != "urn:termfence:server:n1" {
		t.Errorf("ServerIDURI(n1) = %v, %v", u, err)
	}
	if _, err := ServerIDURI("a b"); err == nil {
		t.Error("ServerIDURI accepted an invalid ID")
	}
}

// TestMutualTLSNeedsIdentity: MutualTLS and NewTCP refuse a node
// certificate that could not be a peer's.
func TestMutualTLSNeedsIdentity(t *testing.T) {
	ca := newCA(t, "cluster")
	cc, ck := ca.clientOnly(t, "operator")
	nc, nk := ca.issueSpec(t, certSpec{name: "anon", notBefore: time.Now().Add(-time.Hour), notAfter: time.Now().Add(time.Hour),
		eku: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}})
	for name, files := range map[string][2]string{"client-only": {cc, ck}, "no server ID": {nc, nk}} {
		if _, err := MutualTLS(files[0], files[1], ca.pemFile); !errors.Is(err, ErrCertificate) || !errors.Is(err, ErrNoIdentity) {
			t.Errorf("MutualTLS(%s) = %v, want ErrCertificate and ErrNoIdentity", name, err)
		}
	}
	good := ca.mutual(t, "n1")
	bad := good.Clone()
	bad.Certificates = []tls.Certificate{loadPair(t, cc, ck)}
	noCA := good.Clone()
	noCA.ClientCAs = nil
	optional := good.Clone()
	optional.ClientAuth = tls.VerifyClientCertIfGiven
	for name, cfg := range map[string]*tls.Config{"client-only certificate": bad, "no ClientCAs": noCA, "optional client certificates": optional} {
		if _, err := NewTCP("127.0.0.1:0", "", Config{TLS: cfg, Logger: quietLogger()}); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("NewTCP(%s) = %v, want ErrInvalidConfig", name, err)
		}
	}
	tr := newTestTCP(t, Config{TLS: good})
	if id := LocalServerID(tr); id != "n1" {
		t.Errorf("LocalServerID = %q, want n1", id)
	}
	if id := LocalServerID(newTestTCP(t, Config{})); id != "" {
		t.Errorf("LocalServerID of plain TCP = %q", id)
	}
}

// TestIdentityBound: over mutual TLS an RPC may only claim the server ID
// its certificate names, and a dial reaches only the server raft meant.
func TestIdentityBound(t *testing.T) {
	ca := newCA(t, "cluster")
	a := newTestTCP(t, Config{TLS: ca.mutual(t, "n1"), Timeout: 2 * time.Second})
	b := newTestTCP(t, Config{TLS: ca.mutual(t, "n2"), Timeout: 2 * time.Second})
	got := answer(t, b)
	send := func(target raft.ServerID, claim string) error {
		req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(claim), Addr: []byte(a.LocalAddr())}, Term: 1}
		return a.AppendEntries(target, b.LocalAddr(), req, &raft.AppendEntriesResponse{})
	}
	if err := send("n2", "n1"); err != nil {
		t.Fatalf("n1 -> n2 claiming n1: %v", err)
	}
	select {
	case <-got:
	case <-time.After(testwait.Bound(5 * time.Second)):
		t.Fatal("n2 never received the RPC")
	}
	for _, claim := range []string{"n3", "", "n2"} {
		err := send("n2", claim)
		if err == nil || !strings.Contains(err.Error(), ErrIdentityMismatch.Error()) {
			t.Errorf("n1 claiming %q: err %v, want the identity mismatch", claim, err)
		}
	}
	if s, _ := Inbound(b); s.ClaimRefused != 3 {
		t.Errorf("ClaimRefused = %d, want 3", s.ClaimRefused)
	}
	select {
	case rpc := <-got:
		t.Errorf("a refused claim reached the consumer: %#v", rpc.Command)
	default:
	}
	// n2's address, dialled for n3: the certificate there names n2.
	if err := send("n3", "n1"); !errors.Is(err, ErrIdentityMismatch) {
		t.Errorf("dialling n3 at n2's address: %v, want ErrIdentityMismatch", err)
	}
}

// TestStaleConnectionReplaced: a pooled connection that the peer closed
// while it sat unused (here: the peer's IdleTimeout) is replaced before the
// next RPC is written on it, so that RPC succeeds. raft's NetworkTransport
// alone would send it on the dead connection and fail.
func TestStaleConnectionReplaced(t *testing.T) {
	ca := newCA(t, "cluster")
	for _, withTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain TCP", true: "mutual TLS"}[withTLS], func(t *testing.T) {
			ac, bc := Config{Timeout: 2 * time.Second}, Config{Timeout: 2 * time.Second, IdleTimeout: 100 * time.Millisecond}
			if withTLS {
				ac.TLS, bc.TLS = ca.mutual(t, "n1"), ca.mutual(t, "n2")
			}
			a, b := newTestTCP(t, ac), newTestTCP(t, bc)
			answer(t, b)
			send := func() error {
				req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n1"), Addr: []byte(a.LocalAddr())}, Term: 1}
				return a.AppendEntries("n2", b.LocalAddr(), req, &raft.AppendEntriesResponse{})
			}
			if err := send(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 5*time.Second, "n2 to close the idle connection", func() bool {
				s, _ := Inbound(b)
				return s.IdleClosed == 1 && s.Open == 0
			})
			sent := time.Now()
			waitFor(t, 5*time.Second, "the pooled connection to count as unused", func() bool {
				return time.Since(sent) > staleAfter
			})
			if err := send(); err != nil {
				t.Fatalf("RPC after the peer closed the pooled connection: %v", err)
			}
			if n := a.(*TCP).dial.redials.Load(); n != 1 {
				t.Errorf("%d connections replaced, want 1", n)
			}
		})
	}
}
