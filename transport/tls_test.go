package transport

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io/fs"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/internal/testwait"
)

// testCA is a certificate authority created at test time.
type testCA struct {
	cert    *x509.Certificate
	key     ed25519.PrivateKey
	pemFile string
	pool    *x509.CertPool
}

var serial int64 = 1

func nextSerial() *big.Int { serial++; return big.NewInt(serial) }

func writePEM(t testing.TB, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func newCA(t testing.TB, name string) *testCA {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          nextSerial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pemFile: writePEM(t, t.TempDir(), name+"-ca.pem", "CERTIFICATE", der), pool: pool}
}

// certSpec describes a certificate to issue.
type certSpec struct {
	name                string // common name and file name
	notBefore, notAfter time.Time
	ids                 []string // server IDs to name in URI SANs
	eku                 []x509.ExtKeyUsage
}

// issue creates a node certificate for server name valid from notBefore to
// notAfter, with both server- and client-auth usages and the URI SAN that
// names the server (no DNS or IP names: the transport does not match host
// names), and returns its cert and key files.
func (ca *testCA) issue(t testing.TB, name string, notBefore, notAfter time.Time) (certFile, keyFile string) {
	t.Helper()
	return ca.issueSpec(t, certSpec{name: name, notBefore: notBefore, notAfter: notAfter, ids: []string{name},
		eku: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}})
}

// clientOnly issues what an operator's curl certificate is: signed by the
// cluster CA, client-auth only; it names server name all the same.
func (ca *testCA) clientOnly(t testing.TB, name string) (certFile, keyFile string) {
	t.Helper()
	return ca.issueSpec(t, certSpec{name: name, notBefore: time.Now().Add(-time.Hour), notAfter: time.Now().Add(time.Hour),
		ids: []string{name}, eku: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
}

func (ca *testCA) issueSpec(t testing.TB, c certSpec) (certFile, keyFile string) {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(),
		Subject:      pkix.Name{CommonName: c.name},
		NotBefore:    c.notBefore,
		NotAfter:     c.notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  c.eku,
	}
	for _, id := range c.ids {
		u, err := url.Parse(ServerIDURIPrefix + id)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	return writePEM(t, dir, c.name+".pem", "CERTIFICATE", der), writePEM(t, dir, c.name+"-key.pem", "PRIVATE KEY", pkcs8)
}

func (ca *testCA) valid(t testing.TB, name string) (string, string) {
	return ca.issue(t, name, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
}

func (ca *testCA) mutual(t testing.TB, name string) *tls.Config {
	t.Helper()
	c, k := ca.valid(t, name)
	cfg, err := MutualTLS(c, k, ca.pemFile)
	if err != nil {
		t.Fatalf("MutualTLS: %v", err)
	}
	return cfg
}

func loadPair(t testing.TB, certFile, keyFile string) tls.Certificate {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// intruderTLS trusts any server (it tries its best to get in) and presents
// cert, if any.
func intruderTLS(cert *tls.Certificate) *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true} //nolint:gosec // the intruder
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return cfg
}

// intruderLayer is an intruder's raft.StreamLayer: it dials with its own
// TLS configuration (plain TCP if nil) and accepts on a loopback listener
// with the same.
type intruderLayer struct {
	net.Listener
	cfg *tls.Config
}

func (l *intruderLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if l.cfg == nil {
		return d.Dial("tcp", string(addr))
	}
	return tls.DialWithDialer(d, "tcp", string(addr), l.cfg)
}

// newIntruder returns a raw hashicorp/raft NetworkTransport that speaks TLS
// with cfg (plain TCP if nil): what an attacker would run.
func newIntruder(t *testing.T, cfg *tls.Config) *raft.NetworkTransport {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var l net.Listener = ln
	if cfg != nil {
		l = tls.NewListener(ln, cfg)
	}
	nt := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: &intruderLayer{Listener: l, cfg: cfg}, MaxPool: 1, Timeout: 2 * time.Second, Logger: quietHCLog(),
	})
	t.Cleanup(func() { _ = nt.Close() })
	return nt
}

// attack sends a vote, a pre-vote and an AppendEntries with a much higher
// term from tr to n, claiming to be server claim. Any one of them reaching
// raft would change n's term.
func attack(tr raft.Transport, n *node, term uint64, claim string) []error {
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(claim), Addr: []byte(tr.LocalAddr())}
	var ar raft.AppendEntriesResponse
	var vr raft.RequestVoteResponse
	var pr raft.RequestPreVoteResponse
	return []error{
		tr.AppendEntries(n.id, n.addr, &raft.AppendEntriesRequest{RPCHeader: hdr, Term: term + 10}, &ar),
		tr.RequestVote(n.id, n.addr, &raft.RequestVoteRequest{RPCHeader: hdr, Term: term + 10, LastLogIndex: 1 << 40, LastLogTerm: term + 10}, &vr),
		tr.(raft.WithPreVote).RequestPreVote(n.id, n.addr, &raft.RequestPreVoteRequest{RPCHeader: hdr, Term: term + 10, LastLogIndex: 1 << 40, LastLogTerm: term + 10}, &pr),
	}
}

func checkUnchanged(t *testing.T, nodes []*node, leader *node, term uint64) {
	t.Helper()
	for _, n := range nodes {
		if got := n.r.CurrentTerm(); got != term {
			t.Errorf("%s: term %d, want %d", n.id, got, term)
		}
		if addr, _ := n.r.LeaderWithID(); addr != leader.addr {
			t.Errorf("%s: leader %q, want %q", n.id, addr, leader.addr)
		}
	}
	if leader.r.State() != raft.Leader {
		t.Errorf("leader %s is %v", leader.id, leader.r.State())
	}
}

// TestTLSClusterRefusesIntruders runs a three-node raw raft cluster over
// mutual TLS and shows that an intruder without a certificate, with one from
// another CA, an expired one, a client-only one from the cluster CA (an
// operator's curl certificate), one that names no server, or without TLS at
// all cannot vote, append or join: its RPCs fail and the cluster's leader
// and term stay. A peer with a valid certificate for server "n9" cannot
// claim to be another server. The last subtest is the control: the same
// peer, claiming to be n9, does move the cluster's term (this raw raft
// cluster has no admission layer; package election's refuses it).
func TestTLSClusterRefusesIntruders(t *testing.T) {
	ca := newCA(t, "cluster")
	nodes := startCluster(t, stable,
		newTestTCP(t, Config{TLS: ca.mutual(t, "n0"), Timeout: 2 * time.Second}),
		newTestTCP(t, Config{TLS: ca.mutual(t, "n1"), Timeout: 2 * time.Second}),
		newTestTCP(t, Config{TLS: ca.mutual(t, "n2"), Timeout: 2 * time.Second}))
	leader, term := waitLeader(t, nodes)
	if err := leader.r.Apply([]byte("x"), 5*time.Second).Error(); err != nil {
		t.Fatalf("apply over TLS: %v", err)
	}

	other := newCA(t, "other")
	oc, ok := other.valid(t, "other")
	otherPair := loadPair(t, oc, ok)
	ec, ek := ca.issue(t, "expired", time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
	expiredPair := loadPair(t, ec, ek)
	cc, ck := ca.clientOnly(t, "operator")
	clientPair := loadPair(t, cc, ck)
	nc, nk := ca.issueSpec(t, certSpec{name: "anonymous", notBefore: time.Now().Add(-time.Hour), notAfter: time.Now().Add(time.Hour),
		eku: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}})
	noIDPair := loadPair(t, nc, nk)
	twoc, twok := ca.issueSpec(t, certSpec{name: "two", notBefore: time.Now().Add(-time.Hour), notAfter: time.Now().Add(time.Hour),
		ids: []string{"n1", "n9"}, eku: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}})
	twoPair := loadPair(t, twoc, twok)
	pc, pk := ca.valid(t, "n9")
	peerPair := loadPair(t, pc, pk)
	intruders := []struct {
		name  string
		cfg   *tls.Config
		claim string
		peer  bool // the certificate is a valid peer's (n9): the join is the control's
	}{
		{"no certificate", intruderTLS(nil), "intruder", false},
		{"other CA", intruderTLS(&otherPair), "other", false},
		{"expired", intruderTLS(&expiredPair), "expired", false},
		{"client-only certificate from the cluster CA", intruderTLS(&clientPair), "operator", false},
		{"certificate naming no server", intruderTLS(&noIDPair), "anonymous", false},
		{"certificate naming two servers", intruderTLS(&twoPair), "n1", false},
		{"plain TCP", nil, "intruder", false},
		{"certificate for n9 claiming the leader", intruderTLS(&peerPair), string(leader.id), true},
		{"certificate for n9 claiming nobody", intruderTLS(&peerPair), "", true},
	}
	for _, in := range intruders {
		t.Run(in.name, func(t *testing.T) {
			tr := newIntruder(t, in.cfg)
			for _, n := range nodes {
				for i, err := range attack(tr, n, term, in.claim) {
					if err == nil {
						t.Errorf("RPC %d from intruder to %s succeeded", i, n.id)
					}
				}
			}
			checkUnchanged(t, nodes, leader, term)
			if in.peer {
				return
			}

			// Join: the leader adds the intruder and tries to replicate to
			// it; nothing may reach it. A valid node would get an
			// AppendEntries within a few heartbeat intervals (see the
			// control below), so half a second is ample.
			if err := leader.r.AddNonvoter("intruder", tr.LocalAddr(), 0, 5*time.Second).Error(); err != nil {
				t.Fatalf("AddNonvoter: %v", err)
			}
			select {
			case rpc := <-tr.Consumer():
				t.Errorf("intruder received %T from the cluster", rpc.Command)
			case <-time.After(500 * time.Millisecond):
			}
			if err := leader.r.RemoveServer("intruder", 0, 5*time.Second).Error(); err != nil {
				t.Fatalf("RemoveServer: %v", err)
			}
			checkUnchanged(t, nodes, leader, term)
		})
	}

	t.Run("control: valid certificate gets through", func(t *testing.T) {
		tr := newTestTCP(t, Config{TLS: ca.mutual(t, "rogue"), Timeout: 2 * time.Second})
		stop := make(chan struct{})
		got := make(chan raft.RPC, 1)
		go func() {
			select {
			case rpc := <-tr.Consumer():
				rpc.Respond(&raft.AppendEntriesResponse{Term: term, Success: false}, nil)
				got <- rpc
			case <-stop:
			}
		}()
		if err := leader.r.AddNonvoter("rogue", tr.LocalAddr(), 0, 5*time.Second).Error(); err != nil {
			t.Fatalf("AddNonvoter: %v", err)
		}
		select {
		case <-got:
		case <-time.After(testwait.Bound(5 * time.Second)):
			t.Error("a node with a valid certificate received nothing after joining")
		}
		close(stop)
		if err := leader.r.RemoveServer("rogue", 0, 5*time.Second).Error(); err != nil {
			t.Fatalf("RemoveServer: %v", err)
		}
		for i, err := range attack(tr, leader, term, "rogue") {
			if i == 0 && err != nil {
				t.Errorf("AppendEntries with a valid certificate failed: %v", err)
			}
		}
		waitFor(t, 5*time.Second, "the leader to adopt the higher term", func() bool {
			return leader.r.CurrentTerm() > term
		})
	})
}

func TestMutualTLSErrors(t *testing.T) {
	ca := newCA(t, "cluster")
	other := newCA(t, "other")
	cert, key := ca.valid(t, "n0")
	otherCert, otherKey := other.valid(t, "x")
	expCert, expKey := ca.issue(t, "old", time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing.pem")
	tests := []struct {
		name          string
		cert, key, ca string
		alsoNotExist  bool
	}{
		{"missing cert", missing, key, ca.pemFile, true},
		{"missing key", cert, missing, ca.pemFile, true},
		{"missing CA", cert, key, missing, true},
		{"key of another cert", cert, otherKey, ca.pemFile, false},
		{"garbage cert", garbage, key, ca.pemFile, false},
		{"garbage CA", cert, key, garbage, false},
		{"cert from another CA", otherCert, otherKey, ca.pemFile, false},
		{"expired cert", expCert, expKey, ca.pemFile, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := MutualTLS(tc.cert, tc.key, tc.ca)
			if !errors.Is(err, ErrCertificate) || cfg != nil {
				t.Fatalf("MutualTLS = %v, %v; want ErrCertificate", cfg, err)
			}
			if tc.alsoNotExist && !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("err %v does not wrap fs.ErrNotExist", err)
			}
		})
	}
	cfg, err := MutualTLS(cert, key, ca.pemFile)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ClientAuth != tls.RequireAndVerifyClientCert || cfg.MinVersion < tls.VersionTLS12 || cfg.ClientCAs == nil || cfg.RootCAs == nil {
		t.Fatalf("config does not require mutual TLS: %+v", cfg)
	}
}

// TestTLSSilentPeerReleasedOnClose connects to a TLS transport and never
// starts the handshake; Close must still release the connection and its
// goroutine (goleak in TestMain fails otherwise).
func TestTLSSilentPeerReleasedOnClose(t *testing.T) {
	ca := newCA(t, "cluster")
	tr, err := NewTCP("127.0.0.1:0", "", Config{TLS: ca.mutual(t, "n0"), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", string(tr.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, 5*time.Second, "the transport to accept the connection", func() bool {
		s, _ := Inbound(tr)
		return s.Open == 1
	})
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	// The transport closed its side: the silent peer sees EOF.
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read from a closed transport's connection succeeded")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("transport kept the silent connection open after Close")
	}
}
