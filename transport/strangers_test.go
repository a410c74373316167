package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// rawPeer is one TLS connection speaking raft's wire format by hand, so a
// test knows which connection each RPC travels on.
type rawPeer struct {
	id   string
	conn *tls.Conn
	r    *bufio.Reader
	w    *bufio.Writer
	enc  *codec.Encoder
	dec  *codec.Decoder
}

func dialPeer(addr, id string, cfg *tls.Config) (*rawPeer, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	p := &rawPeer{id: id, conn: c, r: bufio.NewReader(c), w: bufio.NewWriter(c)}
	p.enc = codec.NewEncoder(p.w, &codec.MsgpackHandle{})
	p.dec = codec.NewDecoder(p.r, &codec.MsgpackHandle{})
	return p, nil
}

// preVote sends a RequestPreVote claiming p's own ID and returns the
// answer's error (the RPC's error, or the connection's).
func (p *rawPeer) preVote() error {
	_ = p.conn.SetDeadline(time.Now().Add(30 * time.Second))
	if err := p.w.WriteByte(4); err != nil { // rpcRequestPreVote
		return err
	}
	req := &raft.RequestPreVoteRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(p.id), Addr: []byte("127.0.0.1:1")}, Term: 2}
	if err := p.enc.Encode(req); err != nil {
		return err
	}
	if err := p.w.Flush(); err != nil {
		return err
	}
	var rpcErr string
	if err := p.dec.Decode(&rpcErr); err != nil {
		return err
	}
	var resp raft.RequestPreVoteResponse
	if err := p.dec.Decode(&resp); err != nil {
		return err
	}
	if rpcErr != "" {
		return errors.New(rpcErr)
	}
	return nil
}

// TestStrangersCertificatesUnderCap is a flood of strangers'
// certificates: over mutual TLS, with MaxInbound 8, two members hold one
// connection each (an RPC on it was admitted), and 40 processes holding
// CA-signed peer certificates of servers that are no members connect, keep
// their connections busy with RPCs that are refused, and reconnect when
// closed. The members must keep their connections. On main (4f43917) a
// valid certificate alone ranked a connection as proven, so the strangers'
// busier connections evicted the members'.
func TestStrangersCertificatesUnderCap(t *testing.T) {
	ca := newCA(t, "cluster")
	tr := newTestTCP(t, Config{TLS: ca.mutual(t, "srv"), MaxInbound: 8, Timeout: 10 * time.Second, IdleTimeout: time.Minute, HandshakeTimeout: 10 * time.Second})
	serve(t, tr, func(rpc raft.RPC) {
		h, _ := rpc.Command.(raft.WithRPCHeader)
		if h != nil && strings.HasPrefix(string(h.GetRPCHeader().ID), "member") {
			rpc.Respond(&raft.RequestPreVoteResponse{Term: 2}, nil)
			return
		}
		rpc.Respond(nil, errors.New("not a member"))
	})
	addr := string(tr.LocalAddr())
	var members []*rawPeer
	for i := range 2 {
		members = append(members, dialMember(t, ca, addr, fmt.Sprintf("member%d", i)))
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	dials := 0
	for i := range 40 {
		id := fmt.Sprintf("stranger%d", i)
		cfg := ca.mutual(t, id)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var p *rawPeer
			for range 20 {
				if p == nil {
					var err error
					if p, err = dialPeer(addr, id, cfg); err != nil {
						return
					}
					mu.Lock()
					dials++
					mu.Unlock()
				}
				if err := p.preVote(); err == nil {
					t.Errorf("%s's RPC was answered without an error", id)
				} else if !strings.Contains(err.Error(), "not a member") {
					_ = p.conn.Close() // closed by the server: dial again
					p = nil
				}
			}
			if p != nil {
				_ = p.conn.Close()
			}
		}()
	}
	wg.Wait()
	s, _ := Inbound(tr)
	t.Logf("%d stranger connections; %+v", dials, s)
	if s.Evicted == 0 {
		t.Error("nothing was evicted: the flood never reached the cap")
	}
	for _, p := range members {
		if err := p.preVote(); err != nil {
			t.Errorf("%s lost its connection under the flood: %v", p.id, err)
		}
	}
}

// TestMembershipRanks: with membership known (SetMembership), a TLS
// connection ranks as proven exactly when its certificate names a current
// member — a removed member's connection that had RPCs admitted ranks with
// the strangers' — and, while membership is unknown (a node waiting to
// join), when an RPC on it was admitted.
func TestMembershipRanks(t *testing.T) {
	tr, err := NewTCP("127.0.0.1:0", "", Config{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	known := false
	if !SetMembership(tr, func(id string) (bool, bool) { return id == "m1", known }) {
		t.Fatal("SetMembership: not a transport from NewTCP")
	}
	if SetMembership(NewInmem("x"), nil) {
		t.Error("SetMembership accepted an in-memory transport")
	}
	in := tr.in
	conn := func(peer string, admitted bool) *inConn {
		c := &inConn{s: in, peer: peer}
		c.established.Store(true)
		c.proven.Store(admitted)
		return c
	}
	for _, c := range []struct {
		peer     string
		admitted bool
		known    bool
		want     int
	}{
		{"m1", false, true, 2},
		{"m1", true, true, 2},
		{"removed", true, true, 1},
		{"stranger", false, true, 1},
		{"stranger", false, false, 1},
		{"leader-of-a-joiner", true, false, 2},
		{"", true, true, 2},  // plain TCP: an admitted RPC
		{"", false, true, 1}, // plain TCP: nothing yet
	} {
		known = c.known
		if got := conn(c.peer, c.admitted).rank(); got != c.want {
			t.Errorf("peer %q, admitted %v, membership known %v: rank %d, want %d", c.peer, c.admitted, c.known, got, c.want)
		}
	}
}

func TestAddrMatches(t *testing.T) {
	from := func(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000} }
	for _, c := range []struct {
		claimed, remote string
		ok              bool
	}{
		{"10.0.0.1:7000", "10.0.0.1", true},
		{"10.0.0.1:7000", "10.0.0.2", false},
		{"127.0.0.2:7000", "127.0.0.1", true},
		{"127.0.0.1:7000", "10.0.0.2", false},
		{"[::1]:7000", "127.0.0.1", true},
		{"n1", "10.0.0.2", true}, // not host:port
	} {
		err := addrMatches(c.claimed, from(c.remote))
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrIdentityMismatch)) {
			t.Errorf("claim %s from %s: %v, want ok %v", c.claimed, c.remote, err, c.ok)
		}
	}
}

// TestEvictionNamesPeer: the warning about an evicted connection names the
// server its certificate names once its handshake is done, and none before.
// The eviction runs on the accepting goroutine while the victim's own
// goroutine may still be in its handshake, setting that name: read without
// the order that established gives, it was a data race (the race detector
// found it in TestStrangersCertificatesUnderCap under load).
func TestEvictionNamesPeer(t *testing.T) {
	ca := newCA(t, "cluster")
	logged := &evictionLog{}
	tr := newTestTCP(t, Config{TLS: ca.mutual(t, "srv"), MaxInbound: 1, Logger: slog.New(logged), HandshakeTimeout: 10 * time.Second})
	serve(t, tr, func(rpc raft.RPC) { rpc.Respond(&raft.RequestPreVoteResponse{Term: 2}, nil) })
	addr := string(tr.LocalAddr())
	// A connection that never starts its handshake: member0 evicts it.
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	// member0's RPC is answered; member1 then evicts it.
	dialMember(t, ca, addr, "member0")
	dialMember(t, ca, addr, "member1")
	if got := logged.peers(); len(got) != 2 || got[0] != "" || got[1] != "member0" {
		t.Fatalf("evictions logged with peers %q, want [\"\" \"member0\"]", got)
	}
}

// dialMember connects to addr as id, with a certificate of ca naming it,
// and checks that its first RPC is answered; the test's end closes it.
func dialMember(t *testing.T, ca *testCA, addr, id string) *rawPeer {
	t.Helper()
	p, err := dialPeer(addr, id, ca.mutual(t, id))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.conn.Close() })
	if err := p.preVote(); err != nil {
		t.Fatalf("%s's first RPC: %v", id, err)
	}
	return p
}

// evictionLog records the peer named by each eviction warning.
type evictionLog struct {
	mu    sync.Mutex
	named []string
}

func (l *evictionLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *evictionLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *evictionLog) WithGroup(string) slog.Handler            { return l }

func (l *evictionLog) Handle(_ context.Context, r slog.Record) error {
	if !strings.HasPrefix(r.Message, "too many inbound connections") {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "peer" {
			l.mu.Lock()
			l.named = append(l.named, a.Value.String())
			l.mu.Unlock()
		}
		return true
	})
	return nil
}

func (l *evictionLog) peers() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.named...)
}
