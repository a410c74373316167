package hostile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// Peer is a member of the cluster under attack.
type Peer struct {
	ID, Addr string
	Voter    bool
}

// View is what the generator knows of the cluster: its members (the
// targets, by index), the attacker's own address, and each target's
// current term and last log index (0 if unknown).
type View struct {
	Members   []Peer
	Self      string
	Term      func(target int) uint64
	LastIndex func(target int) uint64
	Leader    func() int // the member that leads, -1 if unknown; may be nil
}

// Short names for the request constructors the attacks use.
type (
	hdrT = raft.RPCHeader
	logT = raft.Log
)

func rv(h hdrT, term, lastIndex, lastTerm uint64, transfer bool) *raft.RequestVoteRequest {
	return &raft.RequestVoteRequest{RPCHeader: h, Term: term, LastLogIndex: lastIndex, LastLogTerm: lastTerm, LeadershipTransfer: transfer}
}

func pv(h hdrT, term, lastIndex, lastTerm uint64) *raft.RequestPreVoteRequest {
	return &raft.RequestPreVoteRequest{RPCHeader: h, Term: term, LastLogIndex: lastIndex, LastLogTerm: lastTerm}
}

func ae(h hdrT, term, prev, prevTerm uint64, es []*logT) *raft.AppendEntriesRequest {
	return &raft.AppendEntriesRequest{RPCHeader: h, Term: term, PrevLogEntry: prev, PrevLogTerm: min(prevTerm, term), Entries: es}
}

func is(h hdrT, term, lastIndex, lastTerm uint64, conf []byte, size int64) *raft.InstallSnapshotRequest {
	return &raft.InstallSnapshotRequest{RPCHeader: h, SnapshotVersion: 1, Term: term, LastLogIndex: lastIndex, LastLogTerm: lastTerm,
		Configuration: conf, ConfigurationIndex: lastIndex, Size: size}
}

func tn(h hdrT) *raft.TimeoutNowRequest { return &raft.TimeoutNowRequest{RPCHeader: h} }

// Kind is an Op's RPC type: raft's wire byte, or Raw.
type Kind byte

// The kinds, raft's wire bytes (net_transport.go) and Raw.
const (
	AppendEntries   Kind = 0
	RequestVote     Kind = 1
	InstallSnapshot Kind = 2
	TimeoutNow      Kind = 3
	RequestPreVote  Kind = 4
	Raw             Kind = 255
)

// Op is one hostile RPC for one target.
type Op struct {
	Target     int
	Kind       Kind
	Name       string // what it is, for logs
	MustRefuse bool   // a correct node refuses it whatever its state
	Req        any    // *raft.AppendEntriesRequest, ... (nil for Raw)
	Data       []byte // InstallSnapshot data
	Frame      []byte // Raw: the bytes sent on a fresh connection
}

// Bounds of what Generate produces.
const (
	maxOps     = 16
	maxEntries = 6
	// maxTerm is epoch.MaxTerm (2^48), repeated here so that this package
	// needs only raft.
	maxTerm uint64 = 1 << 48
)

// src hands out the input's bytes; past the end it returns zeros.
type src struct{ b []byte }

func (s *src) byte() byte {
	if len(s.b) == 0 {
		return 0
	}
	c := s.b[0]
	s.b = s.b[1:]
	return c
}

func (s *src) intn(n int) int { return int(s.byte()) % n }

func (s *src) u64() uint64 {
	var v uint64
	for range 8 {
		v = v<<8 | uint64(s.byte())
	}
	return v
}

func (s *src) bytes(n int) []byte {
	n = min(n, len(s.b))
	b := append([]byte(nil), s.b[:n]...)
	s.b = s.b[n:]
	return b
}

// Generate turns b into at most 17 operations against v's members (see
// AttackSeed for the first).
func Generate(b []byte, v View) []Op {
	if len(v.Members) == 0 {
		return nil
	}
	s := &src{b: b}
	var ops []Op
	if len(b) > 0 && b[0] >= attackPrefix {
		as := Attacks(v)
		ops = append(ops, as[int(s.byte()-attackPrefix)%len(as)])
	}
	n := 1 + s.intn(maxOps)
	for range n {
		ops = append(ops, gen(s, v))
	}
	return ops
}

func hdr(id, addr string) raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(id), Addr: []byte(addr)}
}

// identity picks who the RPC claims to be; bad is true for a claim a
// correct node refuses whatever its state.
func identity(s *src, v View, target int) (h raft.RPCHeader, name string, bad bool) {
	m := v.Members[s.intn(len(v.Members))]
	switch s.intn(8) {
	case 0:
		return hdr("mallory", v.Self), "stranger", true
	case 1:
		return hdr("", v.Self), "no ID", true
	case 2:
		return hdr(m.ID, ""), "no address", true
	case 3:
		return hdr(m.ID, v.Self), m.ID + " at the attacker's address", m.Addr != v.Self
	case 4:
		t := v.Members[target]
		return hdr(t.ID, t.Addr), "the target itself", true
	case 5:
		return hdr(strings.Repeat("x", 300), v.Self), "a 300-byte ID", true
	case 6:
		h := hdr(m.ID, m.Addr)
		h.ProtocolVersion = raft.ProtocolVersion(s.byte())
		return h, m.ID + " with protocol version " + fmt.Sprint(h.ProtocolVersion), false
	}
	return hdr(m.ID, m.Addr), m.ID, false
}

// term picks a term relative to cur.
func term(s *src, cur uint64) uint64 {
	switch s.intn(14) {
	case 0:
		return cur
	case 1:
		return cur + 1
	case 2:
		return cur + uint64(s.byte())
	case 3:
		return cur + 1<<32
	case 4:
		return cur + 1<<32 + 1
	case 5:
		return maxTerm - 1<<40
	case 6:
		return maxTerm - 1
	case 7:
		return maxTerm
	case 8:
		return maxTerm + 1
	case 9:
		return 1 << 63
	case 10:
		return 1<<64 - 1
	case 11:
		return 0
	case 12:
		return cur - min(cur, 1)
	}
	return s.u64()
}

// configuration returns configuration bytes and whether they are valid.
func configuration(s *src, v View) ([]byte, bool) {
	servers := func() []raft.Server {
		var ss []raft.Server
		for _, m := range v.Members {
			suf := raft.Nonvoter
			if m.Voter {
				suf = raft.Voter
			}
			ss = append(ss, raft.Server{Suffrage: suf, ID: raft.ServerID(m.ID), Address: raft.ServerAddress(m.Addr)})
		}
		return ss
	}
	switch s.intn(9) {
	case 0:
		return s.bytes(s.intn(32)), false // garbage (or nothing)
	case 1:
		return nil, false
	case 2:
		ss := servers()
		return raft.EncodeConfiguration(raft.Configuration{Servers: append(ss, ss[0])}), false // a duplicate
	case 3:
		return raft.EncodeConfiguration(raft.Configuration{}), false // no server
	case 4:
		ss := servers()
		for i := range ss {
			ss[i].Suffrage = raft.Nonvoter
		}
		return raft.EncodeConfiguration(raft.Configuration{Servers: ss}), false // no voter
	case 5:
		var ss []raft.Server
		for i := range 300 {
			ss = append(ss, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(fmt.Sprintf("s%d", i)), Address: raft.ServerAddress(fmt.Sprintf("10.0.%d.%d:1", i/256, i%256))})
		}
		return raft.EncodeConfiguration(raft.Configuration{Servers: ss}), false // too many
	case 6:
		ss := servers()
		ss[0].ID = ""
		return raft.EncodeConfiguration(raft.Configuration{Servers: ss}), false
	case 7:
		ss := servers()
		ss[0].Suffrage = raft.ServerSuffrage(7)
		return raft.EncodeConfiguration(raft.Configuration{Servers: ss}), false
	}
	return raft.EncodeConfiguration(raft.Configuration{Servers: servers()}), true
}

// entries returns up to maxEntries entries following prev and whether
// they are well formed.
func entries(s *src, v View, prev, prevTerm, rpcTerm uint64) ([]*raft.Log, bool) {
	n := s.intn(maxEntries + 1)
	ok := true
	var es []*raft.Log
	t := max(prevTerm, min(rpcTerm, prevTerm+1))
	for i := range n {
		l := &raft.Log{Index: prev + 1 + uint64(i), Term: t, Type: raft.LogNoop}
		switch s.intn(12) {
		case 0:
			es = append(es, nil)
			ok = false
			continue
		case 1:
			l.Type = raft.LogType(2 + s.intn(2)) // the deprecated peer changes
			ok = false
		case 2:
			l.Type = raft.LogType(6 + s.intn(250))
			ok = false
		case 3:
			var good bool
			l.Type = raft.LogConfiguration
			l.Data, good = configuration(s, v)
			ok = ok && good
		case 4:
			l.Index = s.u64()
			ok = ok && l.Index == prev+1+uint64(i)
		case 5:
			l.Term = term(s, rpcTerm)
			ok = ok && l.Term >= t && l.Term <= rpcTerm && l.Term > 0
		case 6:
			l.Type = raft.LogCommand
			l.Data = s.bytes(s.intn(64))
			l.Extensions = s.bytes(s.intn(16))
		case 7:
			l.Type = raft.LogBarrier
		}
		if l.Term == 0 {
			ok = false
		}
		es = append(es, l)
	}
	return es, ok
}

func gen(s *src, v View) Op {
	target := s.intn(len(v.Members))
	var cur, last uint64
	if v.Term != nil {
		cur = v.Term(target)
	}
	if v.LastIndex != nil {
		last = v.LastIndex(target)
	}
	h, who, badID := identity(s, v, target)
	op := Op{Target: target, MustRefuse: badID}
	switch k := s.intn(6); k {
	case 0:
		t := term(s, cur)
		prev := last
		if s.intn(3) == 0 {
			prev = s.u64() % (last + 8)
		}
		prevTerm := min(cur, t)
		if s.intn(4) == 0 {
			prevTerm = term(s, cur)
		}
		es, ok := entries(s, v, prev, prevTerm, t)
		op.Kind, op.Req = AppendEntries, &raft.AppendEntriesRequest{
			RPCHeader: h, Term: t, PrevLogEntry: prev, PrevLogTerm: prevTerm, Entries: es, LeaderCommitIndex: prev + uint64(s.intn(3)),
		}
		op.MustRefuse = op.MustRefuse || !ok || prevTerm > t
		op.Name = fmt.Sprintf("AppendEntries as %s term %d prev %d/%d, %d entries", who, t, prev, prevTerm, len(es))
	case 1, 2:
		t := term(s, cur)
		lt := min(t, cur)
		if s.intn(3) == 0 {
			lt = term(s, cur)
		}
		li := last + uint64(s.intn(3))
		if s.intn(4) == 0 {
			li = s.u64()
		}
		if k == 1 {
			op.Kind, op.Req = RequestVote, &raft.RequestVoteRequest{RPCHeader: h, Term: t, LastLogIndex: li, LastLogTerm: lt, LeadershipTransfer: s.intn(2) == 0}
			op.Name = fmt.Sprintf("RequestVote as %s term %d last %d/%d", who, t, li, lt)
		} else {
			op.Kind, op.Req = RequestPreVote, &raft.RequestPreVoteRequest{RPCHeader: h, Term: t, LastLogIndex: li, LastLogTerm: lt}
			op.Name = fmt.Sprintf("RequestPreVote as %s term %d last %d/%d", who, t, li, lt)
		}
		// A pre-vote of term 0 whose LastLogTerm is 0 or 1 is a role
		// renewal (its flags), valid from a member at its address.
		renewal := k == 2 && t == 0 && lt <= 1
		op.MustRefuse = op.MustRefuse || (lt > t && !renewal)
	case 3:
		t := term(s, cur)
		conf, ok := configuration(s, v)
		version := raft.SnapshotVersion(1)
		if s.intn(4) == 0 {
			version = raft.SnapshotVersion(s.intn(3))
		}
		data := s.bytes(s.intn(64))
		size := int64(len(data))
		if s.intn(5) == 0 {
			size = -int64(s.intn(100))
		}
		li := last + 1 + uint64(s.intn(100))
		op.Kind, op.Data, op.Req = InstallSnapshot, data, &raft.InstallSnapshotRequest{
			RPCHeader: h, SnapshotVersion: version, Term: t, LastLogIndex: li, LastLogTerm: min(t, cur+1),
			Configuration: conf, ConfigurationIndex: li, Size: size,
		}
		op.MustRefuse = op.MustRefuse || !ok || version != 1 || size < 0
		op.Name = fmt.Sprintf("InstallSnapshot as %s term %d version %d size %d (config ok %v)", who, t, version, size, ok)
	case 4:
		op.Kind, op.Req = TimeoutNow, &raft.TimeoutNowRequest{RPCHeader: h}
		op.Name = "TimeoutNow as " + who
	default:
		op.Kind = Raw
		op.Frame, op.Name, op.MustRefuse = rawFrame(s)
	}
	return op
}

// rawFrame is a frame raft's encoder never writes, and whether a correct
// node refuses it whatever its state (garbage might, by chance, begin with
// a request).
func rawFrame(s *src) ([]byte, string, bool) {
	var b bytes.Buffer
	switch s.intn(5) {
	case 0: // the eightMiB frame's shape: an Entries array with a huge count
		b.Write([]byte{0, 0x81, 0xa7})
		b.WriteString("Entries")
		b.WriteByte(0xdd)
		_ = binary.Write(&b, binary.BigEndian, uint32(8<<20))
		b.Write(bytes.Repeat([]byte{0x80}, 4096))
		return b.Bytes(), "frame: Entries array of 8 M maps", true
	case 1:
		b.Write([]byte{0, 0xdf, 0xff, 0xff, 0xff, 0xff})
		return b.Bytes(), "frame: map of 2^32-1 pairs", true
	case 2:
		b.Write([]byte{1, 0x81, 0xa4, 'T', 'e', 'r', 'm', 0xc6, 0x7f, 0xff, 0xff, 0xff})
		return b.Bytes(), "frame: a 2 GiB binary", true
	case 3:
		b.WriteByte(byte(5 + s.intn(250)))
		return b.Bytes(), "frame: unknown rpc type", true
	}
	b.WriteByte(byte(s.intn(5)))
	b.Write(s.bytes(64))
	b.WriteByte(0xc1)
	return b.Bytes(), "frame: garbage", false
}

// Send delivers op to addr through tr (a raw raft transport: the attacker's)
// or, for a Raw op, on a fresh TCP connection, and returns the answer's
// error: nil means the node answered without an error (it admitted the
// RPC). A Raw frame answered without an error text counts as admitted.
func Send(tr raft.Transport, addr string, op Op, timeout time.Duration) error {
	to := raft.ServerAddress(addr)
	switch r := op.Req.(type) {
	case *raft.AppendEntriesRequest:
		return tr.AppendEntries("", to, r, &raft.AppendEntriesResponse{})
	case *raft.RequestVoteRequest:
		return tr.RequestVote("", to, r, &raft.RequestVoteResponse{})
	case *raft.RequestPreVoteRequest:
		pv, ok := tr.(raft.WithPreVote)
		if !ok {
			return errors.New("hostile: transport without pre-vote")
		}
		return pv.RequestPreVote("", to, r, &raft.RequestPreVoteResponse{})
	case *raft.InstallSnapshotRequest:
		return tr.InstallSnapshot("", to, r, &raft.InstallSnapshotResponse{}, bytes.NewReader(op.Data))
	case *raft.TimeoutNowRequest:
		return tr.TimeoutNow("", to, r, &raft.TimeoutNowResponse{})
	}
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write(op.Frame); err != nil {
		return err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite() // an incomplete frame ends here: no wait for the idle timeout
	}
	// raft answers with the error's text, then the response.
	var rpcErr string
	if err := codec.NewDecoder(c, &codec.MsgpackHandle{}).Decode(&rpcErr); err != nil {
		return err // closed (or timed out): not answered
	}
	if rpcErr != "" {
		return errors.New(rpcErr)
	}
	return nil
}
