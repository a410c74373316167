package transport

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// The differential test of the two parsers of one inbound byte stream:
// the transport's frame scanner (framescan.go) and raft's decoder
// (hashicorp/go-msgpack, as NetworkTransport.handleCommand uses it). The
// same bytes go through both. Raft's decoder never reads a request the
// scanner did not pass whole; where both read a request, they read the
// same type, the same end and the same snapshot Size (so the same next
// request); the decoder may refuse a request the scanner passed (a content
// error such as a time that does not parse: raft then closes the
// connection and reads nothing more); and decoding allocates at most
// allocPerByte times the bytes it read, plus allocPerRequest per request
// and allocOnError for the error that ends a connection.

// The allocation bound of decoding, checked on every input: what raft's
// decoder allocates for the bytes the scanner passes. allocPerRequest
// covers the request struct and its header's byte slices, which a
// request of a few dozen bytes costs whatever it holds.
// A decoding error, which ends the connection, costs allocOnError more
// (go-msgpack's error value and its message); a stream that ends inside a
// str or bin up to allocAhead more: go-msgpack allocates a byte slice's
// declared length, up to 256 KiB at a time, before its bytes arrive (one
// at a time per connection: the next waits for these bytes).
const (
	allocPerByte    = 4
	allocPerRequest = 1024
	allocOnError    = 16 << 10
	allocAhead      = 256 << 10
)

var warmDecoder sync.Once

// frame is one request as a parser read it.
type frame struct {
	typ  byte
	end  int   // offset just past the request (before snapshot data)
	size int64 // InstallSnapshot: the data bytes that follow (0 if none)
}

// scanFrames passes stream through a frame scanner at the default caps,
// one byte at a time, and returns the requests it completed, and how many
// bytes it passed before it refused one (len(stream) if it refused none).
func scanFrames(stream []byte) ([]frame, int, error) {
	sc := newFrameScanner(DefaultMaxRPCSize, DefaultMaxRPCPayload, DefaultMaxRPCEntries)
	var fs []frame
	for i := range stream {
		was := sc.inFrame
		if err := sc.scan(stream[i : i+1]); err != nil {
			return fs, i, err
		}
		if was && !sc.inFrame {
			fs = append(fs, frame{typ: sc.rpcType, end: i + 1, size: max(sc.snapshot, 0)})
		}
	}
	return fs, len(stream), nil
}

// decodeFrames reads stream as raft's NetworkTransport does: a type byte,
// one msgpack request with a fresh MsgpackHandle, then an InstallSnapshot's
// Size bytes of data. It returns the requests it decoded, the bytes
// allocated while decoding, and the error that ended it (nil at a clean
// end of stream).
func decodeFrames(stream []byte) ([]frame, uint64, error) {
	warmDecoder.Do(func() {
		// go-msgpack builds each type's decoding tables once per
		// process, on first use: not a cost of any one input.
		for _, newTime := range []bool{false, true} {
			h := &codec.MsgpackHandle{}
			h.TimeNotBuiltin = !newTime
			for _, req := range []any{
				&raft.AppendEntriesRequest{Entries: []*raft.Log{{Data: []byte("x"), AppendedAt: time.Now()}}},
				&raft.RequestVoteRequest{}, &raft.InstallSnapshotRequest{}, &raft.TimeoutNowRequest{}, &raft.RequestPreVoteRequest{},
			} {
				var b []byte
				_ = codec.NewEncoderBytes(&b, h).Encode(req)
				_ = codec.NewDecoderBytes(b, &codec.MsgpackHandle{}).Decode(req)
			}
		}
	})
	rd := bytes.NewReader(stream)
	dec := codec.NewDecoder(rd, &codec.MsgpackHandle{})
	var fs []frame
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var err error
	for {
		var typ byte
		if typ, err = rd.ReadByte(); err != nil {
			err = nil // a clean end between requests
			break
		}
		var size int64
		switch typ {
		case rpcAppendEntries:
			err = dec.Decode(&raft.AppendEntriesRequest{})
		case rpcRequestVote:
			err = dec.Decode(&raft.RequestVoteRequest{})
		case rpcInstallSnapshot:
			var req raft.InstallSnapshotRequest
			err = dec.Decode(&req)
			size = req.Size
		case rpcTimeoutNow:
			err = dec.Decode(&raft.TimeoutNowRequest{})
		case rpcRequestPreVote:
			err = dec.Decode(&raft.RequestPreVoteRequest{})
		default:
			err = fmt.Errorf("unknown rpc type %d", typ)
		}
		if err != nil {
			break
		}
		fs = append(fs, frame{typ: typ, end: len(stream) - rd.Len(), size: max(size, 0)})
		if size > 0 { // the data, which raft streams and never decodes
			if size > int64(rd.Len()) {
				break
			}
			if _, err = rd.Seek(size, io.SeekCurrent); err != nil {
				break
			}
		}
	}
	runtime.ReadMemStats(&after)
	return fs, after.TotalAlloc - before.TotalAlloc, err
}

// checkParsersAgree is the oracle: see the top of this file.
func checkParsersAgree(t *testing.T, stream []byte) (passed, requests int, alloc uint64) {
	t.Helper()
	scanned, passed, serr := scanFrames(stream)
	prefix := stream[:passed] // what reaches raft's decoder
	decoded, alloc, derr := decodeFrames(prefix)
	// TotalAlloc counts the whole process (in a fuzz worker, its
	// goroutine that talks to the coordinator too): the least of three
	// decodings is this input's.
	for range 2 {
		_, a, _ := decodeFrames(prefix)
		alloc = min(alloc, a)
	}
	for i, s := range scanned {
		if i >= len(decoded) {
			// raft's decoder refused a request the scanner passed (a
			// content error: a time that does not parse, a Type above
			// 255): raft closes the connection and reads nothing more.
			break
		}
		if d := decoded[i]; d != s {
			t.Fatalf("request %d: the scanner read %+v, raft's decoder %+v", i, s, d)
		}
	}
	if len(decoded) > len(scanned) {
		d := decoded[len(scanned)]
		t.Fatalf("raft's decoder read request %d (%+v) that the scanner did not pass whole (scanner: %v)", len(scanned), d, serr)
	}
	bound := uint64(allocPerByte*len(prefix) + allocPerRequest*(len(decoded)+1))
	if derr != nil {
		bound += allocOnError
		if len(prefix) < len(stream) || errors.Is(derr, io.ErrUnexpectedEOF) || errors.Is(derr, io.EOF) {
			// Cut off inside a str or bin: go-msgpack allocated up to
			// allocAhead for its declared length before the bytes came.
			bound += allocAhead
		}
	}
	if alloc > bound {
		t.Fatalf("decoding %d bytes (%d requests) allocated %d bytes, more than %d", len(prefix), len(decoded), alloc, bound)
	}
	return len(prefix), len(decoded), alloc
}

// FuzzFrameParsers mutates byte streams seeded from recorded raft traffic
// (testdata/fuzz/FuzzFrameParsers, see TestRecordFrames) and the attacks on the scanner,
// and checks that the scanner and raft's decoder agree on each.
func FuzzFrameParsers(f *testing.F) {
	// The recorded streams in testdata/fuzz/FuzzFrameParsers are seeds
	// already.
	for _, s := range frameSeeds(f)[len(corpusSeeds(f)):] {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		if len(stream) > 1<<20 {
			return
		}
		checkParsersAgree(t, stream)
	})
}

// frameSeeds are the recorded streams, raft's encodings of every request
// and the attacks.
func frameSeeds(tb testing.TB) [][]byte {
	seeds := corpusSeeds(tb)
	seeds = append(seeds, honestStream(tb, false), honestStream(tb, true), entriesFrame(tb, 3))
	for _, a := range scannerAttacks(tb) {
		seeds = append(seeds, a.frame)
	}
	return seeds
}

// TestFrameParsersAgree runs the oracle on every seed, and logs the worst
// allocation per byte.
func TestFrameParsersAgree(t *testing.T) {
	var worst, worstBig, worstFixed float64
	for _, s := range frameSeeds(t) {
		n, reqs, alloc := checkParsersAgree(t, s)
		if n == 0 {
			continue
		}
		worst = max(worst, float64(alloc)/float64(n))
		if n >= 4096 {
			worstBig = max(worstBig, float64(alloc)/float64(n))
		}
		worstFixed = max(worstFixed, (float64(alloc)-allocPerByte*float64(n))/float64(reqs+1))
	}
	t.Logf("%d seeds: worst allocation per byte decoded %.2f (%.2f over inputs of 4 KiB or more); worst beyond %d per byte, per request: %.0f bytes",
		len(frameSeeds(t)), worst, worstBig, allocPerByte, worstFixed)
}

type scannerAttack struct {
	name  string
	frame []byte
}

// scannerAttacks are frames that hashicorp/go-msgpack decodes otherwise
// than a scanner reading the msgpack grammar alone: on c3e6887 each let a
// frame's snapshot Size differ between the two, so the scanner passed N
// bytes unchecked that raft decoded as further requests.
func scannerAttacks(tb testing.TB) []scannerAttack { return scannerAttacksWith(tb, 64) }

// scannerAttacksWith is scannerAttacks with n bytes of "snapshot data": an
// AppendEntries of 2,097,152 entries, the first n-16 of them, which the
// old scanner passed as data and raft decoded as the next request.
func scannerAttacksWith(tb testing.TB, n int) []scannerAttack {
	smuggled := append([]byte{rpcAppendEntries, 0x81, 0xa7}, "Entries"...)
	smuggled = append(smuggled, 0xdd, 0x00, 0x20, 0x00, 0x00)
	smuggled = append(smuggled, bytes.Repeat([]byte{0x80}, n-len(smuggled))...)
	snap := &raft.InstallSnapshotRequest{RPCHeader: rpcHeader(), SnapshotVersion: 1, Term: 5, LastLogIndex: 90, LastLogTerm: 4,
		ConfigurationIndex: 3, Size: int64(len(smuggled))}
	honest := encodeRPC(tb, rpcInstallSnapshot, snap, false)
	// in the honest frame, the last pair (Term: 5, after Size in raft's
	// key order) replaced, so the map's count stays right and the decoder
	// takes the replacement last.
	withKey := func(pair ...byte) []byte {
		term := []byte{0xa4, 'T', 'e', 'r', 'm', 0x05}
		if !bytes.HasSuffix(honest, term) {
			tb.Fatalf("the honest snapshot frame does not end in Term 5: %x", honest)
		}
		b := append(append([]byte(nil), honest[:len(honest)-len(term)]...), pair...)
		return append(b, smuggled...)
	}
	return []scannerAttack{
		{"a second Size, nil", withKey(0xa4, 'S', 'i', 'z', 'e', 0xc0)},
		{"a second Size, 0", withKey(0xa4, 'S', 'i', 'z', 'e', 0x00)},
		{"a bin-typed Size key", withKey(0xc4, 4, 'S', 'i', 'z', 'e', 0x00)},
		{"an array-typed Size key", withKey(0x94, 'S', 'i', 'z', 'e', 0x00)},
		{"the request as an array", append([]byte{rpcTimeoutNow, 0x93, 0x03, 0xc0, 0xc0}, smuggled...)},
		{"a nil entry", nilEntryFrame(tb)},
		{"entries of no fields", emptyEntriesFrame(tb)},
		{"an unknown field", withKey(0xa4, 'T', 'e', 'r', 'n', 0x05)},
		{"a bin-typed key", withKey(0xc4, 4, 'T', 'e', 'r', 'm', 0x05)},
		{"nil where a number belongs", withKey(0xa4, 'T', 'e', 'r', 'm', 0xc0)},
		{"a float where a number belongs", withKey(0xa4, 'T', 'e', 'r', 'm', 0xcb, 0x40, 0x14, 0, 0, 0, 0, 0, 0)},
	}
}

// TestScannerAttacks: each frame above is refused (counted in
// FrameRefused) before raft decodes a byte of the smuggled request, and
// the two parsers agree on what came before.
func TestScannerAttacks(t *testing.T) {
	for _, a := range scannerAttacks(t) {
		_, passed, err := scanFrames(a.frame)
		if !errors.Is(err, ErrFrameRefused) {
			t.Errorf("%s: scanner err %v, want ErrFrameRefused", a.name, err)
			continue
		}
		if !strings.Contains(err.Error(), "frame refused") {
			t.Errorf("%s: %v", a.name, err)
		}
		if dec, _, _ := decodeFrames(a.frame[:passed]); len(dec) != 0 {
			t.Errorf("%s: raft's decoder read %d requests of what the scanner passed", a.name, len(dec))
		}
		checkParsersAgree(t, a.frame)
	}
}

// nilEntryFrame is an AppendEntries whose one entry is nil.
func nilEntryFrame(t testing.TB) []byte {
	return encodeRPC(t, rpcAppendEntries, &raft.AppendEntriesRequest{RPCHeader: rpcHeader(), Term: 3, Entries: []*raft.Log{nil}}, false)
}

// TestSmuggledRequestRefused sends each attack over a real connection: an
// InstallSnapshot whose Size the old scanner and raft's decoder read
// differently, followed by 2 MiB of "snapshot data" that is an
// AppendEntries of 2,097,152 entries. On c3e6887 the scanner passed those
// bytes as data, raft decoded them as a request (341-426 MiB allocated,
// FrameRefused 0). Now the connection is closed at the offending key,
// FrameRefused counts it, no RPC reaches the consumer, and the receiver
// allocates less than allocPerByte times what was sent.
func TestSmuggledRequestRefused(t *testing.T) {
	for _, a := range scannerAttacksWith(t, 2<<20) {
		if !strings.Contains(a.name, "Size") {
			continue
		}
		t.Run(strings.ReplaceAll(a.name, " ", "_"), func(t *testing.T) {
			tr, err := NewTCP("127.0.0.1:0", "", Config{Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			var delivered atomic.Int64
			serve(t, tr, func(rpc raft.RPC) {
				delivered.Add(1)
				if rpc.Reader != nil {
					_, _ = io.Copy(io.Discard, rpc.Reader)
				}
				rpc.Respond(nil, errors.New("refused"))
			})
			frame := a.frame
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			conn, err := net.Dial("tcp", string(tr.LocalAddr()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			go func(b []byte) { _, _ = conn.Write(b) }(frame) // fails half way: the receiver closes
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Minute))
			_, _ = io.Copy(io.Discard, conn)
			runtime.ReadMemStats(&after)
			grew := after.TotalAlloc - before.TotalAlloc
			ratio := float64(grew) / float64(len(frame))
			t.Logf("sent %d bytes; the process allocated %d bytes (%.2fx)", len(frame), grew, ratio)
			waitFor(t, 10*time.Second, "the refusal counted", func() bool {
				s, _ := Inbound(tr)
				return s.FrameRefused == 1
			})
			if n := delivered.Load(); n != 0 {
				t.Errorf("%d RPCs reached the consumer", n)
			}
			if ratio >= allocPerByte {
				t.Errorf("receiving %d bytes allocated %d, %.1f times as much", len(frame), grew, ratio)
			}
		})
	}
}

// emptyEntriesFrame is an AppendEntries of 1024 entries that are empty
// maps: one byte on the wire each, a raft.Log allocated for each by the
// decoder.
func emptyEntriesFrame(t testing.TB) []byte {
	b := encodeRPC(t, rpcAppendEntries, &raft.AppendEntriesRequest{RPCHeader: rpcHeader(), Term: 3}, false)
	empty := append([]byte{0xdc, 0x04, 0x00}, bytes.Repeat([]byte{0x80}, 1024)...)
	out := bytes.Replace(b, []byte("\xa7Entries\xc0"), append([]byte("\xa7Entries"), empty...), 1)
	if bytes.Equal(out, b) {
		t.Fatalf("no nil Entries in %x", b)
	}
	return out
}
