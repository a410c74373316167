package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// encodeRPC is what raft's NetworkTransport writes for one request.
func encodeRPC(t testing.TB, typ byte, req any, newTime bool) []byte {
	var b bytes.Buffer
	b.WriteByte(typ)
	h := &codec.MsgpackHandle{}
	h.TimeNotBuiltin = !newTime
	enc := codec.NewEncoder(&b, h)
	if err := enc.Encode(req); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func rpcHeader() raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n1"), Addr: []byte("127.0.0.1:7000")}
}

// honestStream is a stream of every request raft sends, as raft encodes
// them, with a snapshot's data after its request.
func honestStream(t testing.TB, newTime bool) []byte {
	var entries []*raft.Log
	for i := range 64 {
		entries = append(entries, &raft.Log{Index: uint64(i + 10), Term: 3, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(i)}, i*100),
			Extensions: []byte("ext"), AppendedAt: time.Now()})
	}
	conf := raft.EncodeConfiguration(raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: "n1", Address: "127.0.0.1:7000"}}})
	snap := bytes.Repeat([]byte{0xc1, 0xdd, 0xff}, 70000) // data that would break msgpack: it is never scanned as msgpack
	var s []byte
	s = append(s, encodeRPC(t, rpcAppendEntries, &raft.AppendEntriesRequest{RPCHeader: rpcHeader(), Term: 3, PrevLogEntry: 9, PrevLogTerm: 2, Entries: entries, LeaderCommitIndex: 9}, newTime)...)
	s = append(s, encodeRPC(t, rpcAppendEntries, &raft.AppendEntriesRequest{RPCHeader: rpcHeader(), Term: 1 << 40}, newTime)...)
	s = append(s, encodeRPC(t, rpcRequestVote, &raft.RequestVoteRequest{RPCHeader: rpcHeader(), Term: 4, LastLogIndex: 1 << 33, LastLogTerm: 3, LeadershipTransfer: true}, newTime)...)
	s = append(s, encodeRPC(t, rpcRequestPreVote, &raft.RequestPreVoteRequest{RPCHeader: rpcHeader(), Term: 5, LastLogIndex: 7, LastLogTerm: 3}, newTime)...)
	s = append(s, encodeRPC(t, rpcInstallSnapshot, &raft.InstallSnapshotRequest{RPCHeader: rpcHeader(), SnapshotVersion: 1, Term: 5, LastLogIndex: 90, LastLogTerm: 4,
		Configuration: conf, ConfigurationIndex: 3, Size: int64(len(snap))}, newTime)...)
	s = append(s, snap...)
	s = append(s, encodeRPC(t, rpcTimeoutNow, &raft.TimeoutNowRequest{RPCHeader: rpcHeader()}, newTime)...)
	s = append(s, encodeRPC(t, rpcAppendEntries, &raft.AppendEntriesRequest{RPCHeader: rpcHeader(), Term: 3}, newTime)...)
	return s
}

// TestFrameScannerPassesRaft: every request raft sends, encoded as raft
// encodes it, passes the scanner at the default caps, in chunks of any
// size, and the scanner ends between requests.
func TestFrameScannerPassesRaft(t *testing.T) {
	for _, newTime := range []bool{false, true} {
		s := honestStream(t, newTime)
		for _, chunk := range []int{1, 7, 4096, len(s)} {
			sc := newFrameScanner(DefaultMaxRPCSize, DefaultMaxRPCPayload, DefaultMaxRPCEntries)
			for b := s; len(b) > 0; {
				n := min(chunk, len(b))
				if err := sc.scan(b[:n]); err != nil {
					t.Fatalf("newTime %v, chunks of %d: %v", newTime, chunk, err)
				}
				b = b[n:]
			}
			if sc.inFrame || sc.snapshot != 0 {
				t.Errorf("newTime %v, chunks of %d: scanner mid-request at the end (inFrame %v, snapshot %d)", newTime, chunk, sc.inFrame, sc.snapshot)
			}
		}
	}
}

// bigArrayFrame is an AppendEntries request whose Entries array holds n
// one-byte msgpack maps: the 8 MiB hostile frame for n = 8<<20.
func bigArrayFrame(n int) []byte {
	var b bytes.Buffer
	b.WriteByte(rpcAppendEntries)
	b.WriteByte(0x83) // map of 3
	b.Write([]byte{0xa9})
	b.WriteString("RPCHeader")
	b.Write([]byte{0x82, 0xa2, 'I', 'D', 0xa1, 'x', 0xa4, 'A', 'd', 'd', 'r', 0xa1, 'y'})
	b.Write([]byte{0xa4})
	b.WriteString("Term")
	b.WriteByte(0x07)
	b.Write([]byte{0xa7})
	b.WriteString("Entries")
	b.WriteByte(0xdd)
	_ = binary.Write(&b, binary.BigEndian, uint32(n))
	b.Write(bytes.Repeat([]byte{0x80}, n))
	return b.Bytes()
}

func TestFrameScannerRefuses(t *testing.T) {
	for _, c := range []struct {
		name  string
		frame []byte
		size  int64
		n     int
	}{
		{"8 M one-byte maps (the first 1000)", bigArrayFrame(8 << 20)[:1000], DefaultMaxRPCSize, DefaultMaxRPCEntries},
		{"1025 entries", bigArrayFrame(1025), DefaultMaxRPCSize, DefaultMaxRPCEntries},
		{"over MaxRPCSize", encodeRPC(t, rpcAppendEntries, &raft.AppendEntriesRequest{RPCHeader: rpcHeader(), Term: 3,
			Entries: []*raft.Log{{Index: 1, Term: 1, Data: make([]byte, 2000)}}}, false), 1000, DefaultMaxRPCEntries},
		{"a payload over MaxRPCPayload", encodeRPC(t, rpcAppendEntries, &raft.AppendEntriesRequest{RPCHeader: rpcHeader(), Term: 3,
			Entries: []*raft.Log{{Index: 1, Term: 1, Data: make([]byte, DefaultMaxRPCPayload+1)}}}, false), DefaultMaxRPCSize, DefaultMaxRPCEntries},
		{"unknown rpc type", []byte{9, 0x80}, DefaultMaxRPCSize, DefaultMaxRPCEntries},
		{"0xc1", []byte{0, 0x81, 0xc1}, DefaultMaxRPCSize, DefaultMaxRPCEntries},
		{"nested 9 deep", []byte{0, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x00}, DefaultMaxRPCSize, DefaultMaxRPCEntries},
		{"a map of 2^32-1 pairs", []byte{0, 0xdf, 0xff, 0xff, 0xff, 0xff}, DefaultMaxRPCSize, DefaultMaxRPCEntries},
		{"a string of 2^32-1 bytes", []byte{0, 0x81, 0xdb, 0xff, 0xff, 0xff, 0xff}, DefaultMaxRPCSize, DefaultMaxRPCEntries},
	} {
		sc := newFrameScanner(c.size, DefaultMaxRPCPayload, c.n)
		if err := sc.scan(c.frame); !errors.Is(err, ErrFrameRefused) {
			t.Errorf("%s: err %v, want ErrFrameRefused", c.name, err)
		}
	}
	// 1024 entries, as raft writes them, pass; 1025 do not.
	sc := newFrameScanner(DefaultMaxRPCSize, DefaultMaxRPCPayload, DefaultMaxRPCEntries)
	if err := sc.scan(entriesFrame(t, 1024)); err != nil || sc.inFrame {
		t.Errorf("1024 entries: %v (inFrame %v)", err, sc.inFrame)
	}
	sc = newFrameScanner(DefaultMaxRPCSize, DefaultMaxRPCPayload, DefaultMaxRPCEntries)
	if err := sc.scan(entriesFrame(t, 1025)); !errors.Is(err, ErrFrameRefused) {
		t.Errorf("1025 entries: err %v, want ErrFrameRefused", err)
	}
}

// entriesFrame is an AppendEntries of n entries as raft encodes it.
func entriesFrame(t testing.TB, n int) []byte {
	entries := make([]*raft.Log, n)
	for i := range entries {
		entries[i] = &raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogNoop}
	}
	return encodeRPC(t, rpcAppendEntries, &raft.AppendEntriesRequest{RPCHeader: rpcHeader(), Term: 3, Entries: entries}, false)
}

// TestEightMiBFrame is the memory amplification of a hostile frame: one 8 MiB
// AppendEntries whose Entries array holds 8 M one-byte msgpack maps, sent
// over plain TCP with no identity at all. On main (4f43917) raft decoded
// it before anything looked at it and the receiving process allocated
// about 70 times its size. Now the transport refuses it at the array's
// header; the test checks that the receiver allocated less than 16 times
// the frame's size while it came in, and logs the ratio.
func TestEightMiBFrame(t *testing.T) {
	tr, err := NewTCP("127.0.0.1:0", "", Config{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	serve(t, tr, func(rpc raft.RPC) { rpc.Respond(nil, errors.New("refused")) })
	frame := bigArrayFrame(8 << 20)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	conn, err := net.Dial("tcp", string(tr.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	go func(b []byte) { _, _ = conn.Write(b) }(frame) // may fail half way: the receiver closes
	// The receiver either answers (it decoded the frame) or closes.
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Minute))
	_, _ = io.Copy(io.Discard, conn)
	runtime.ReadMemStats(&after)
	grew := after.TotalAlloc - before.TotalAlloc
	size := len(frame)
	frame = nil
	debug.FreeOSMemory() // the tests after this one run with a small heap
	ratio := float64(grew) / float64(size)
	t.Logf("frame %d bytes; the process allocated %d bytes while receiving it (%.2fx)", size, grew, ratio)
	if ratio >= 16 {
		t.Errorf("receiving the %d-byte frame allocated %d bytes, %.1f times its size", size, grew, ratio)
	}
}

// TestLargeHonestFrame: the largest well-formed AppendEntries the default
// caps let through — 1024 entries of 8 KiB less some, and 7 entries of
// 1 MiB — are delivered, and decoding each allocates less than 16 times
// its size (the ratios are logged).
func TestLargeHonestFrame(t *testing.T) {
	largeFrame(t, 1000, 8000)
	largeFrame(t, 7, DefaultMaxRPCPayload)
}

func largeFrame(t *testing.T, n, size int) {
	tr, err := NewTCP("127.0.0.1:0", "", Config{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	gotc := make(chan int, 1)
	serve(t, tr, func(rpc raft.RPC) {
		if ae, ok := rpc.Command.(*raft.AppendEntriesRequest); ok && len(ae.Entries) > 0 {
			gotc <- len(ae.Entries) * len(ae.Entries[0].Data)
		}
		rpc.Respond(&raft.AppendEntriesResponse{}, nil)
	})
	var entries []*raft.Log
	for i := range n {
		entries = append(entries, &raft.Log{Index: uint64(i + 1), Term: 1, Data: make([]byte, size)})
	}
	frame := encodeRPC(t, rpcAppendEntries, &raft.AppendEntriesRequest{RPCHeader: rpcHeader(), Term: 3, Entries: entries}, false)
	entries = nil
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	conn, err := net.Dial("tcp", string(tr.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(frame); err != nil {
		t.Fatal(err)
	}
	if got := <-gotc; got != n*size {
		t.Fatalf("delivered %d bytes of entries, want %d", got, n*size)
	}
	runtime.ReadMemStats(&after)
	grew := after.TotalAlloc - before.TotalAlloc
	debug.FreeOSMemory() // the tests after this one run with a small heap
	ratio := float64(grew) / float64(len(frame))
	t.Logf("%d entries of %d bytes, frame %d bytes; the process allocated %d bytes receiving it (%.2fx)", n, size, len(frame), grew, ratio)
	if ratio >= 16 {
		t.Errorf("receiving the %d-byte frame allocated %.1f times its size", len(frame), ratio)
	}
}

// serve answers tr's RPCs with fn until the test ends.
func serve(t *testing.T, tr Transport, fn func(raft.RPC)) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case rpc := <-tr.Consumer():
				fn(rpc)
			case <-done:
				return
			}
		}
	}()
	t.Cleanup(func() { close(done); <-stopped })
}
