package election

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/transport"
	"github.com/termfence/termfence/transport/transporttest"
)

// forgery is one hostile RPC and the refusal it must earn.
type forgery struct {
	name string
	want RefusalReason
	// claimsLeader: the RPC claims the leader's ID, so the leader refuses
	// it as RefusedClaimsSelf.
	claimsLeader bool
	send         func(from raft.Transport, to *tcpNode, c *tcpCluster, ld *tcpNode, term uint64) error
}

// hdr is an RPC header claiming id at addr.
func hdr(id, addr string) raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(id), Addr: []byte(addr)}
}

// forgeries are the hostile RPCs of hostile.Attacks and a few more: what a process
// that is not a member can send, claiming to be nobody, a stranger, or (with
// an impossible term) a member.
func forgeries(stranger string) []forgery {
	return []forgery{
		{"RequestVote, empty ID, transfer flag, term 2^63", RefusedNoIdentity, false, func(tr raft.Transport, to *tcpNode, _ *tcpCluster, _ *tcpNode, _ uint64) error {
			return tr.RequestVote("", raft.ServerAddress(to.addr), &raft.RequestVoteRequest{
				RPCHeader: hdr("", stranger), Term: 1 << 63, LastLogIndex: 1 << 40, LastLogTerm: 1 << 63, LeadershipTransfer: true,
			}, &raft.RequestVoteResponse{})
		}},
		{"RequestVote, empty ID and address, term 2^64-2", RefusedNoIdentity, false, func(tr raft.Transport, to *tcpNode, _ *tcpCluster, _ *tcpNode, _ uint64) error {
			return tr.RequestVote("", raft.ServerAddress(to.addr), &raft.RequestVoteRequest{
				RPCHeader: hdr("", ""), Term: 1<<64 - 2, LastLogIndex: 1 << 40, LastLogTerm: 1<<64 - 2, LeadershipTransfer: true,
			}, &raft.RequestVoteResponse{})
		}},
		{"RequestVote, stranger's ID, longer log, transfer flag", RefusedNotVoter, false, func(tr raft.Transport, to *tcpNode, _ *tcpCluster, _ *tcpNode, term uint64) error {
			return tr.RequestVote("", raft.ServerAddress(to.addr), &raft.RequestVoteRequest{
				RPCHeader: hdr("mallory", stranger), Term: term + 1, LastLogIndex: 1 << 40, LastLogTerm: term, LeadershipTransfer: true,
			}, &raft.RequestVoteResponse{})
		}},
		{"RequestPreVote, stranger's ID", RefusedNotVoter, false, func(tr raft.Transport, to *tcpNode, _ *tcpCluster, _ *tcpNode, term uint64) error {
			return tr.(raft.WithPreVote).RequestPreVote("", raft.ServerAddress(to.addr), &raft.RequestPreVoteRequest{
				RPCHeader: hdr("mallory", stranger), Term: term + 1, LastLogIndex: 1 << 40, LastLogTerm: term,
			}, &raft.RequestPreVoteResponse{})
		}},
		{"RequestVote, a member's ID at the stranger's address", RefusedNotVoter, false, func(tr raft.Transport, to *tcpNode, c *tcpCluster, _ *tcpNode, term uint64) error {
			other := c.other(to)
			return tr.RequestVote("", raft.ServerAddress(to.addr), &raft.RequestVoteRequest{
				RPCHeader: hdr(other.id, stranger), Term: term + 1, LastLogIndex: 1 << 40, LastLogTerm: term, LeadershipTransfer: true,
			}, &raft.RequestVoteResponse{})
		}},
		{"TimeoutNow, stranger's ID", RefusedNotLeader, false, func(tr raft.Transport, to *tcpNode, _ *tcpCluster, _ *tcpNode, _ uint64) error {
			return tr.TimeoutNow("", raft.ServerAddress(to.addr), &raft.TimeoutNowRequest{RPCHeader: hdr("mallory", stranger)}, &raft.TimeoutNowResponse{})
		}},
		{"TimeoutNow, empty ID", RefusedNoIdentity, false, func(tr raft.Transport, to *tcpNode, _ *tcpCluster, _ *tcpNode, _ uint64) error {
			return tr.TimeoutNow("", raft.ServerAddress(to.addr), &raft.TimeoutNowRequest{RPCHeader: hdr("", stranger)}, &raft.TimeoutNowResponse{})
		}},
		{"TimeoutNow, a member that does not lead", RefusedNotLeader, false, func(tr raft.Transport, to *tcpNode, c *tcpCluster, ld *tcpNode, _ uint64) error {
			for _, nd := range c.nodes {
				if nd != to && nd != ld {
					return tr.TimeoutNow("", raft.ServerAddress(to.addr), &raft.TimeoutNowRequest{RPCHeader: hdr(nd.id, nd.addr)}, &raft.TimeoutNowResponse{})
				}
			}
			return errors.New("test bug: no member that does not lead")
		}},
		{"AppendEntries, stranger's ID, term 2^62", RefusedTermTooHigh, false, func(tr raft.Transport, to *tcpNode, _ *tcpCluster, _ *tcpNode, _ uint64) error {
			return tr.AppendEntries("", raft.ServerAddress(to.addr), &raft.AppendEntriesRequest{RPCHeader: hdr("mallory", stranger), Term: 1 << 62}, &raft.AppendEntriesResponse{})
		}},
		{"AppendEntries, stranger's ID, next term", RefusedNotMember, false, func(tr raft.Transport, to *tcpNode, _ *tcpCluster, _ *tcpNode, term uint64) error {
			return tr.AppendEntries("", raft.ServerAddress(to.addr), &raft.AppendEntriesRequest{RPCHeader: hdr("mallory", stranger), Term: term + 1}, &raft.AppendEntriesResponse{})
		}},
		{"AppendEntries, empty ID, term 2^62", RefusedNoIdentity, false, func(tr raft.Transport, to *tcpNode, _ *tcpCluster, _ *tcpNode, _ uint64) error {
			return tr.AppendEntries("", raft.ServerAddress(to.addr), &raft.AppendEntriesRequest{RPCHeader: hdr("", stranger), Term: 1 << 62}, &raft.AppendEntriesResponse{})
		}},
		{"AppendEntries, the leader's ID and address, term 2^62", RefusedTermTooHigh, true, func(tr raft.Transport, to *tcpNode, _ *tcpCluster, ld *tcpNode, _ uint64) error {
			return tr.AppendEntries("", raft.ServerAddress(to.addr), &raft.AppendEntriesRequest{RPCHeader: hdr(ld.id, ld.addr), Term: 1 << 62}, &raft.AppendEntriesResponse{})
		}},
		{"AppendEntries, the leader's ID, current term, an entry of term 2^62", RefusedTermTooHigh, true, func(tr raft.Transport, to *tcpNode, _ *tcpCluster, ld *tcpNode, term uint64) error {
			return tr.AppendEntries("", raft.ServerAddress(to.addr), &raft.AppendEntriesRequest{
				RPCHeader: hdr(ld.id, ld.addr), Term: term, Entries: []*raft.Log{{Index: 1 << 40, Term: 1 << 62, Type: raft.LogNoop}},
			}, &raft.AppendEntriesResponse{})
		}},
		{"AppendEntries claiming this node's own ID", RefusedClaimsSelf, false, func(tr raft.Transport, to *tcpNode, _ *tcpCluster, _ *tcpNode, term uint64) error {
			return tr.AppendEntries("", raft.ServerAddress(to.addr), &raft.AppendEntriesRequest{RPCHeader: hdr(to.id, to.addr), Term: term + 1}, &raft.AppendEntriesResponse{})
		}},
		{"InstallSnapshot, stranger's ID, term 2^62", RefusedTermTooHigh, false, func(tr raft.Transport, to *tcpNode, _ *tcpCluster, _ *tcpNode, _ uint64) error {
			data := bytes.Repeat([]byte("x"), 1<<16)
			return tr.InstallSnapshot("", raft.ServerAddress(to.addr), &raft.InstallSnapshotRequest{
				RPCHeader: hdr("mallory", stranger), SnapshotVersion: raft.SnapshotVersionMax, Term: 1 << 62,
				LastLogIndex: 1 << 40, LastLogTerm: 1 << 62, Size: int64(len(data)),
			}, &raft.InstallSnapshotResponse{}, bytes.NewReader(data))
		}},
		{"InstallSnapshot, stranger's ID, next term", RefusedNotMember, false, func(tr raft.Transport, to *tcpNode, _ *tcpCluster, _ *tcpNode, term uint64) error {
			data := bytes.Repeat([]byte("x"), 1<<16)
			return tr.InstallSnapshot("", raft.ServerAddress(to.addr), &raft.InstallSnapshotRequest{
				RPCHeader: hdr("mallory", stranger), SnapshotVersion: raft.SnapshotVersionMax, Term: term + 1,
				LastLogIndex: 1 << 40, LastLogTerm: term, Size: int64(len(data)),
			}, &raft.InstallSnapshotResponse{}, bytes.NewReader(data))
		}},
	}
}

// other returns a node other than nd.
func (c *tcpCluster) other(nd *tcpNode) *tcpNode {
	for _, o := range c.nodes {
		if o != nd {
			return o
		}
	}
	return nil
}

// snapshot is what must not change: every node's term and leader, and the
// leader's epoch.
type snapshot struct {
	terms   map[string]uint64
	leaders map[string]string
	epoch   epoch.Epoch
}

func (c *tcpCluster) snapshot(ld *tcpNode) snapshot {
	s := snapshot{terms: map[string]uint64{}, leaders: map[string]string{}}
	for _, nd := range c.nodes {
		_, id := nd.el.Raft().LeaderWithID()
		s.terms[nd.id], s.leaders[nd.id] = nd.el.Raft().CurrentTerm(), string(id)
	}
	s.epoch, _ = ld.el.Epoch()
	return s
}

func (s snapshot) diff(o snapshot) string {
	var d []string
	for id, t := range s.terms {
		if o.terms[id] != t {
			d = append(d, fmt.Sprintf("%s's term %d -> %d", id, t, o.terms[id]))
		}
		if o.leaders[id] != s.leaders[id] {
			d = append(d, fmt.Sprintf("%s's leader %q -> %q", id, s.leaders[id], o.leaders[id]))
		}
	}
	if s.epoch != o.epoch {
		d = append(d, fmt.Sprintf("leader's epoch %v -> %v", s.epoch, o.epoch))
	}
	return strings.Join(d, "; ")
}

// insane describes what in s no election since before explains: a term
// more than 1000 above the highest before (the forged terms are 2^62 and
// up), or a leader that is not a member.
func (s snapshot) insane(before snapshot, c *tcpCluster) string {
	var high uint64
	for _, t := range before.terms {
		high = max(high, t)
	}
	members := map[string]bool{"": true}
	for _, nd := range c.nodes {
		members[nd.id] = true
	}
	var d []string
	for id, t := range s.terms {
		if t > high+1000 {
			d = append(d, fmt.Sprintf("%s's term %d, from at most %d", id, t, high))
		}
		if !members[s.leaders[id]] {
			d = append(d, fmt.Sprintf("%s follows %q, no member", id, s.leaders[id]))
		}
	}
	return strings.Join(d, "; ")
}

// How attack checks who refused the forgeries.
const (
	byAdmission = iota // plain TCP: the admission layer, each for its reason
	byTransport        // TLS, a peer certificate of a stranger: the transport (a claim that is not the certificate's) or the admission layer
	atHandshake        // TLS, a certificate that is no peer's: nothing gets past the handshake
)

// attack sends every forgery from tr to every node and checks that each was
// refused with an error, by whom mode says, and that no node's term, leader
// or epoch moved. An attempt during which raft logged a timeout of its own
// (load on a 2-core machine) proves nothing and is repeated.
func (c *tcpCluster) attack(tr raft.Transport, fs []forgery, mode int) {
	c.t.Helper()
	deadline := time.Now().Add(waitLong)
	for {
		ld, _ := c.leaderAbove(0)
		start := time.Now()
		before := c.snapshot(ld)
		want := map[string]map[RefusalReason]uint64{}
		got0 := map[string]AdmissionStats{}
		in0 := map[string]transport.InboundStats{}
		for _, nd := range c.nodes {
			got0[nd.id] = nd.el.Admission()
			in0[nd.id], _ = transport.Inbound(nd.tr)
			want[nd.id] = map[RefusalReason]uint64{}
		}
		for _, f := range fs {
			for _, nd := range c.nodes {
				err := f.send(tr, nd, c, ld, before.terms[nd.id])
				if err == nil {
					c.t.Errorf("%s to %s: accepted, want an error", f.name, nd.id)
				}
				if f.claimsLeader && nd == ld {
					want[nd.id][RefusedClaimsSelf]++
				} else {
					want[nd.id][f.want]++
				}
			}
		}
		after := c.snapshot(ld)
		changed := before.diff(after)
		switch {
		case changed == "":
		case !c.check.disturbedSince(start.Add(-2 * c.et)):
			c.t.Fatalf("the forged RPCs changed the cluster: %s", changed)
		case time.Now().Before(deadline):
			c.t.Logf("raft timed out on its own during the attack (%s); again", changed)
			continue
		default:
			// Raft kept timing out on its own (a machine too loaded for
			// these timeouts): what changed may be its own doing. Check
			// what no election explains: a term far above where it was, a
			// leader that is no member. The refusal counts below still
			// say whether each forged RPC was refused.
			if insane := after.insane(before, c); insane != "" {
				c.t.Fatalf("the forged RPCs changed the cluster: %s", insane)
			}
			c.t.Logf("raft kept timing out on its own for %v; checked only that no term jumped and no stranger leads (%s)", waitLong, changed)
		}
		for _, nd := range c.nodes {
			got := nd.el.Admission()
			in, _ := transport.Inbound(nd.tr)
			refused := uint64(0)
			for _, r := range RefusalReasons() {
				refused += got.Refused[r] - got0[nd.id].Refused[r]
			}
			switch mode {
			case byAdmission:
				for r, n := range want[nd.id] {
					if d := got.Refused[r] - got0[nd.id].Refused[r]; d != n {
						c.t.Errorf("%s refused %d RPCs as %s, want %d", nd.id, d, r, n)
					}
				}
			case byTransport:
				claims := in.ClaimRefused - in0[nd.id].ClaimRefused
				if refused+claims != uint64(len(fs)) {
					c.t.Errorf("%s: %d refused by admission + %d claims refused by the transport, want %d", nd.id, refused, claims, len(fs))
				}
			case atHandshake:
				if refused != 0 {
					c.t.Errorf("%s: %d forged RPCs got past the handshake to the admission layer", nd.id, refused)
				}
				if in.HandshakeFailed == in0[nd.id].HandshakeFailed {
					c.t.Errorf("%s: no handshake failed", nd.id)
				}
			}
		}
		return
	}
}

// TestForgedRPCsChangeNothing is the first promise against forgery, over plain TCP:
// a raw hashicorp/raft transport that is not a member sends every node of a
// three-node cluster forged votes (empty ID with the transfer flag and term
// 2^63, a stranger with a longer log), TimeoutNow requests and appends with
// term 2^62. Each is answered with an error, and every node's term, the
// leader and its epoch are unchanged.
//
// Over plain TCP the admission layer can check only what an RPC claims; a
// stranger who claims a member's ID at its address, with a sane term, is
// indistinguishable from it (TestMutualTLSBindsIdentity covers that).
func TestForgedRPCsChangeNothing(t *testing.T) {
	c := newTCPCluster(t, []string{"f1", "f2", "f3"}, nil)
	stranger, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 2*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	c.attack(stranger, forgeries(string(stranger.LocalAddr())), byAdmission)
}

// tlsStranger is a raw hashicorp/raft NetworkTransport that dials over TLS
// with cfg: a process that is not a member, holding some certificate.
type tlsStranger struct {
	net.Listener
	cfg *tls.Config
}

func (s *tlsStranger) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", string(addr), s.cfg)
}

func newTLSStranger(t *testing.T, cfg *tls.Config) *raft.NetworkTransport {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nt := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: &tlsStranger{Listener: ln, cfg: cfg}, MaxPool: 1, Timeout: 2 * time.Second, Logger: hclog.NewNullLogger(),
	})
	t.Cleanup(func() { _ = nt.Close() })
	return nt
}

// TestMutualTLSBindsIdentity is the same promise over mutual TLS:
// the same forged RPCs, sent by a process holding a client-only
// certificate from the cluster CA (an operator's curl certificate), and by
// one holding a valid peer certificate that names another server
// ("mallory", no member) — which can neither claim a member's ID (its
// certificate says mallory: the transport refuses the claim) nor act as
// mallory (not a member: the admission layer refuses). Every RPC fails, and
// every node's term, the leader and its epoch stay.
func TestMutualTLSBindsIdentity(t *testing.T) {
	ca, err := transporttest.NewCA(t.TempDir(), "cluster")
	if err != nil {
		t.Fatal(err)
	}
	mutual := func(id string, spec *transporttest.Spec) *tls.Config {
		var cert, key string
		var err error
		if spec == nil {
			cert, key, err = ca.Peer(id)
		} else {
			cert, key, err = ca.Issue(*spec)
		}
		if err != nil {
			t.Fatal(err)
		}
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		if spec != nil { // an attacker's: no checks of its own
			return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair}, InsecureSkipVerify: true} //nolint:gosec // the attacker
		}
		cfg, err := transport.MutualTLS(cert, key, ca.CertFile)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	c := newTCPCluster(t, []string{"f1", "f2", "f3"}, func(id string) transport.Config {
		return transport.Config{TLS: mutual(id, nil), Timeout: 2 * time.Second}
	})
	t.Run("client-only certificate", func(t *testing.T) {
		tr := newTLSStranger(t, mutual("", &transporttest.Spec{Name: "operator", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}))
		c.t = t
		c.attack(tr, forgeries(string(tr.LocalAddr())), atHandshake)
	})
	t.Run("certificate naming another server", func(t *testing.T) {
		tr := newTLSStranger(t, mutual("", &transporttest.Spec{Name: "mallory"}))
		c.t = t
		fs := forgeries(string(tr.LocalAddr()))
		// What mallory can also send: a TimeoutNow as the leader, an
		// append as the leader with a sane term — over plain TCP these
		// would pass as the leader's own.
		fs = append(fs,
			forgery{"TimeoutNow claiming the leader", RefusedNotLeader, false, func(tr raft.Transport, to *tcpNode, _ *tcpCluster, ld *tcpNode, _ uint64) error {
				return tr.TimeoutNow("", raft.ServerAddress(to.addr), &raft.TimeoutNowRequest{RPCHeader: hdr(ld.id, ld.addr)}, &raft.TimeoutNowResponse{})
			}},
			forgery{"AppendEntries claiming the leader, next term", RefusedNotMember, false, func(tr raft.Transport, to *tcpNode, _ *tcpCluster, ld *tcpNode, term uint64) error {
				return tr.AppendEntries("", raft.ServerAddress(to.addr), &raft.AppendEntriesRequest{RPCHeader: hdr(ld.id, ld.addr), Term: term + 1}, &raft.AppendEntriesResponse{})
			}},
			forgery{"RequestVote as mallory, transfer flag", RefusedNotVoter, false, func(tr raft.Transport, to *tcpNode, _ *tcpCluster, _ *tcpNode, term uint64) error {
				return tr.RequestVote("", raft.ServerAddress(to.addr), &raft.RequestVoteRequest{
					RPCHeader: hdr("mallory", string(tr.LocalAddr())), Term: term + 1, LastLogIndex: 1 << 40, LastLogTerm: term, LeadershipTransfer: true,
				}, &raft.RequestVoteResponse{})
			}},
		)
		c.attack(tr, fs, byTransport)
	})
}

func TestRefusalReasonString(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range RefusalReasons() {
		s := r.String()
		if seen[s] || strings.HasPrefix(s, "reason_") {
			t.Errorf("reason %d has name %q", r, s)
		}
		seen[s] = true
	}
	if len(seen) != numRefusalReasons {
		t.Errorf("%d names for %d reasons", len(seen), numRefusalReasons)
	}
	err := error(&RefusedError{Reason: RefusedNotVoter, Command: "RequestVote", ID: "x"})
	if !errors.Is(err, ErrRefused) {
		t.Errorf("RefusedError does not match ErrRefused")
	}
}
