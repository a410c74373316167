package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrFrameRefused is wrapped when an inbound connection sends a request
// that breaks the decoding caps (Config.MaxRPCSize, Config.MaxRPCEntries,
// Config.MaxRPCPayload) or is not written as raft writes requests (see
// frameScanner): the connection is closed before raft's decoder sees the
// offending bytes.
var ErrFrameRefused = errors.New("transport: rpc frame refused")

// The raft wire format, as hashicorp/raft v1.7.2's NetworkTransport reads
// it: one byte of RPC type, then the request as one msgpack value (a map
// of field names to values), then, for InstallSnapshot only, the
// snapshot's Size bytes, which are streamed to raft and never decoded.
const (
	rpcAppendEntries   = 0
	rpcRequestVote     = 1
	rpcInstallSnapshot = 2
	rpcTimeoutNow      = 3
	rpcRequestPreVote  = 4

	// maxDepth bounds the nesting of containers in a request: a request
	// map holds an array of entries, each a map.
	maxDepth = 8
	// itemsPerEntry bounds the msgpack items one log entry may take (a map
	// of 6 fields is 13 items); the items of a request may number at most
	// itemsPerEntry*MaxRPCEntries + itemsSlack.
	itemsPerEntry = 16
	itemsSlack    = 256
	// maxKeyLen is the longest field name raft v1.7.2 writes
	// ("ConfigurationIndex", 18 bytes), with room.
	maxKeyLen = 32
)

// What a value may be, by where it stands (the request's schema).
type valueKind uint8

const (
	kindUint    valueKind = iota + 1 // an unsigned integer encoding: positive fixint, uint8..64
	kindInt                          // an integer encoding: positive or negative fixint, uint8..64, int8..64
	kindBool                         // true or false
	kindBytes                        // nil, a str or a bin
	kindEntries                      // nil or an array of log entries
	kindLog                          // a map with exactly the fields of a raft.Log
	kindRequest                      // a map with exactly the fields of the request's type
	kindKey                          // a map key: a str naming a field
)

func (k valueKind) String() string {
	switch k {
	case kindUint:
		return "an unsigned integer"
	case kindInt:
		return "an integer"
	case kindBool:
		return "a boolean"
	case kindBytes:
		return "a byte string"
	case kindEntries:
		return "an array of entries"
	case kindLog:
		return "a log entry"
	case kindRequest:
		return "the request map"
	case kindKey:
		return "a field name"
	}
	return "nothing"
}

type field struct {
	name string
	kind valueKind
}

// schema is the field set of one struct raft encodes, as
// hashicorp/go-msgpack writes it for raft v1.7.2: every exported field,
// the embedded RPCHeader's inline, each once, none left out.
type schema []field

func (s schema) index(name []byte) int {
	for i, f := range s {
		if f.name == string(name) {
			return i
		}
	}
	return -1
}

var (
	headerFields = []field{{"ProtocolVersion", kindInt}, {"ID", kindBytes}, {"Addr", kindBytes}}

	schemaLog = schema{{"Index", kindUint}, {"Term", kindUint}, {"Type", kindUint}, {"Data", kindBytes},
		{"Extensions", kindBytes}, {"AppendedAt", kindBytes}}
	schemas = [...]schema{
		rpcAppendEntries: append(schema{{"Term", kindUint}, {"Leader", kindBytes}, {"PrevLogEntry", kindUint},
			{"PrevLogTerm", kindUint}, {"Entries", kindEntries}, {"LeaderCommitIndex", kindUint}}, headerFields...),
		rpcRequestVote: append(schema{{"Term", kindUint}, {"Candidate", kindBytes}, {"LastLogIndex", kindUint},
			{"LastLogTerm", kindUint}, {"LeadershipTransfer", kindBool}}, headerFields...),
		rpcInstallSnapshot: append(schema{{"SnapshotVersion", kindInt}, {"Term", kindUint}, {"Leader", kindBytes},
			{"LastLogIndex", kindUint}, {"LastLogTerm", kindUint}, {"Peers", kindBytes}, {"Configuration", kindBytes},
			{"ConfigurationIndex", kindUint}, {"Size", kindInt}}, headerFields...),
		rpcTimeoutNow:     append(schema{}, headerFields...),
		rpcRequestPreVote: append(schema{{"Term", kindUint}, {"LastLogIndex", kindUint}, {"LastLogTerm", kindUint}}, headerFields...),
	}
)

// level is an open container: the request (a one-item array at the
// bottom of the stack holds it), an array of entries, or a map.
type level struct {
	left   int64     // items still to come
	schema schema    // a map's fields (nil: an array)
	elem   valueKind // an array's elements
	seen   uint32    // a map: the fields seen (bit i: schema[i])
	field  int       // a map: the field whose value comes next
}

// frameScanner follows the msgpack structure of the request bytes an
// inbound connection sends, before raft's decoder sees them, and refuses
// (with an error wrapping ErrFrameRefused) every request that is not
// written as raft v1.7.2 writes it, or that breaks a cap:
//
//   - the request is a map whose keys are exactly the field names of its
//     type (the schemas above), each a msgpack str, each once; so is every
//     log entry of an AppendEntries (a map, never nil);
//   - each value has its field's msgpack type: an integer encoding for a
//     number (nil, a float or an extension are refused), true or false for
//     a flag, nil, a str or a bin for a byte slice, nil or an array of log
//     entries for Entries;
//   - at most maxSize bytes, no str or bin longer than maxPay, no array of
//     more than maxLen entries, at most maxItems msgpack items.
//
// So raft's decoder (hashicorp/go-msgpack) reads every request exactly as
// the scanner did: it takes a duplicate key's last value, a nil number as
// zero, a bin- or array-typed key as a field name, and a struct from an
// array by position, and each of those would let the two read a
// different InstallSnapshot Size, and so a different end of the request.
// None reaches it. And decoding costs memory in proportion to the bytes
// received: an entry is a complete map, tens of bytes, never one nil byte.
//
// It reads no value it does not need: a payload is skipped in bulk. It
// reads field names, and one value: the InstallSnapshot's Size, to pass
// that many bytes of snapshot data after the request.
type frameScanner struct {
	maxSize  int64
	maxPay   int64
	maxLen   int64
	maxItems int64

	inFrame  bool
	rpcType  byte
	size     int64   // bytes of the current request so far
	items    int64   // msgpack items of the current request so far
	stack    []level // open containers
	hdr      [9]byte // a header being collected
	hdrLen   int     // bytes of hdr collected
	hdrNeed  int     // bytes hdr needs (0: none being collected)
	skip     int64   // payload bytes still to skip
	snapshot int64   // snapshot data bytes still to pass after the request

	key      []byte // a field name being collected
	inKey    bool   // the payload being skipped is a field name
	snapSize int64  // the InstallSnapshot's Size
}

func newFrameScanner(maxSize, maxPayload int64, maxEntries int) *frameScanner {
	return &frameScanner{maxSize: maxSize, maxPay: maxPayload, maxLen: int64(maxEntries),
		maxItems: int64(maxEntries)*itemsPerEntry + itemsSlack, key: make([]byte, 0, maxKeyLen)}
}

// scan follows b, the next bytes of the stream.
func (s *frameScanner) scan(b []byte) error {
	for len(b) > 0 {
		if s.snapshot > 0 { // snapshot data: passed through, never decoded
			n := min(int64(len(b)), s.snapshot)
			s.snapshot -= n
			b = b[n:]
			continue
		}
		if !s.inFrame {
			t := b[0]
			b = b[1:]
			if t > rpcRequestPreVote {
				return fmt.Errorf("%w: unknown rpc type %d", ErrFrameRefused, t)
			}
			s.inFrame, s.rpcType, s.size, s.items, s.snapSize = true, t, 1, 0, 0
			s.stack = append(s.stack[:0], level{left: 1, elem: kindRequest})
			continue
		}
		if s.skip > 0 {
			n := min(int64(len(b)), s.skip)
			if err := s.grow(n); err != nil {
				return err
			}
			if s.inKey {
				s.key = append(s.key, b[:n]...)
			}
			s.skip -= n
			b = b[n:]
			if s.skip == 0 {
				if err := s.valueDone(); err != nil {
					return err
				}
			}
			continue
		}
		if err := s.grow(1); err != nil {
			return err
		}
		c := b[0]
		b = b[1:]
		if s.hdrNeed > 0 {
			s.hdr[s.hdrLen] = c
			s.hdrLen++
			if s.hdrLen == s.hdrNeed {
				if err := s.header(); err != nil {
					return err
				}
			}
			continue
		}
		if err := s.first(c); err != nil {
			return err
		}
	}
	return nil
}

// grow counts n more bytes of the request.
func (s *frameScanner) grow(n int64) error {
	s.size += n
	if s.size > s.maxSize {
		return fmt.Errorf("%w: request of more than %d bytes", ErrFrameRefused, s.maxSize)
	}
	return nil
}

// next is the kind of the value to come.
func (s *frameScanner) next() valueKind {
	top := &s.stack[len(s.stack)-1]
	switch {
	case top.schema == nil:
		return top.elem
	case top.left%2 == 0:
		return kindKey
	}
	return top.schema[top.field].kind
}

// misplaced is the error for byte c where a value of kind k belongs.
func misplaced(c byte, k valueKind) error {
	return fmt.Errorf("%w: msgpack byte %#02x where %s belongs", ErrFrameRefused, c, k)
}

// first handles the first byte of a value.
func (s *frameScanner) first(c byte) error {
	s.items++
	if s.items > s.maxItems {
		return fmt.Errorf("%w: request of more than %d msgpack items", ErrFrameRefused, s.maxItems)
	}
	k := s.next()
	s.hdr[0], s.hdrLen = c, 1
	fixint := c <= 0x7f || c >= 0xe0
	fixmap := c >= 0x80 && c <= 0x8f
	fixarray := c >= 0x90 && c <= 0x9f
	fixstr := c >= 0xa0 && c <= 0xbf
	switch k {
	case kindUint:
		switch {
		case c <= 0x7f:
			return s.valueDone()
		case c >= 0xcc && c <= 0xcf:
			s.hdrNeed = 1 + headerExtra(c)
			return nil
		}
	case kindInt:
		switch {
		case fixint:
			s.intValue(int64(int8(c)))
			return s.valueDone()
		case c >= 0xcc && c <= 0xd3:
			s.hdrNeed = 1 + headerExtra(c)
			return nil
		}
	case kindBool:
		if c == 0xc2 || c == 0xc3 {
			return s.valueDone()
		}
	case kindBytes:
		switch {
		case c == 0xc0:
			return s.valueDone()
		case fixstr:
			return s.payload(int64(c & 0x1f))
		case c >= 0xc4 && c <= 0xc6, c >= 0xd9 && c <= 0xdb:
			s.hdrNeed = 1 + headerExtra(c)
			return nil
		}
	case kindKey:
		switch {
		case fixstr:
			return s.payload(int64(c & 0x1f))
		case c >= 0xd9 && c <= 0xdb:
			s.hdrNeed = 1 + headerExtra(c)
			return nil
		}
	case kindEntries:
		switch {
		case c == 0xc0:
			return s.valueDone()
		case fixarray:
			return s.open(int64(c&0x0f), false)
		case c == 0xdc || c == 0xdd:
			s.hdrNeed = 1 + headerExtra(c)
			return nil
		}
	case kindLog, kindRequest:
		switch {
		case fixmap:
			return s.open(int64(c&0x0f), true)
		case c == 0xde || c == 0xdf:
			s.hdrNeed = 1 + headerExtra(c)
			return nil
		}
	}
	return misplaced(c, k)
}

// headerExtra is the number of bytes after c in the header of a value
// whose first byte is c (0xc4..0xdf).
func headerExtra(c byte) int {
	switch c {
	case 0xc4, 0xcc, 0xd0, 0xd9:
		return 1
	case 0xc5, 0xcd, 0xd1, 0xda, 0xdc, 0xde:
		return 2
	case 0xc6, 0xca, 0xce, 0xd2, 0xdb, 0xdd, 0xdf:
		return 4
	case 0xcb, 0xcf, 0xd3:
		return 8
	}
	return 0
}

// header handles a complete multi-byte header in s.hdr (first accepted
// its first byte for the kind of value that stands here).
func (s *frameScanner) header() error {
	h := s.hdr[1:s.hdrLen]
	c := s.hdr[0]
	s.hdrNeed, s.hdrLen = 0, 0
	be := func() int64 {
		switch len(h) {
		case 1:
			return int64(h[0])
		case 2:
			return int64(binary.BigEndian.Uint16(h))
		case 4:
			return int64(binary.BigEndian.Uint32(h))
		}
		return int64(binary.BigEndian.Uint64(h)) // may be negative, as go-msgpack's DecodeInt64 reads it
	}
	switch c {
	case 0xcc, 0xcd, 0xce, 0xcf:
		s.intValue(be())
		return s.valueDone()
	case 0xd0:
		s.intValue(int64(int8(h[0])))
		return s.valueDone()
	case 0xd1:
		s.intValue(int64(int16(binary.BigEndian.Uint16(h))))
		return s.valueDone()
	case 0xd2:
		s.intValue(int64(int32(binary.BigEndian.Uint32(h))))
		return s.valueDone()
	case 0xd3:
		s.intValue(int64(binary.BigEndian.Uint64(h)))
		return s.valueDone()
	case 0xc4, 0xc5, 0xc6, 0xd9, 0xda, 0xdb:
		return s.payload(be())
	case 0xdc, 0xdd:
		return s.open(be(), false)
	case 0xde, 0xdf:
		return s.open(be(), true)
	}
	return misplaced(c, s.next())
}

// open starts a container of n elements where a value of kind s.next()
// belongs (first checked that it may): an array of entries, or a map (the
// request or a log entry) of n pairs, 2n items.
func (s *frameScanner) open(n int64, isMap bool) error {
	if n > s.maxLen {
		return fmt.Errorf("%w: msgpack container of %d elements, more than %d", ErrFrameRefused, n, s.maxLen)
	}
	lv := level{left: n, elem: kindLog}
	if k := s.next(); isMap {
		lv.schema = schemaLog
		if k == kindRequest {
			lv.schema = schemas[s.rpcType]
		}
		if n != int64(len(lv.schema)) {
			return fmt.Errorf("%w: %s of %d fields, want %d", ErrFrameRefused, k, n, len(lv.schema))
		}
		lv.left = 2 * n
	}
	if n == 0 {
		return s.valueDone()
	}
	if len(s.stack) >= maxDepth {
		return fmt.Errorf("%w: msgpack nested deeper than %d", ErrFrameRefused, maxDepth)
	}
	s.stack = append(s.stack, lv)
	return nil
}

// payload starts skipping n bytes of a str or bin; a field name is
// collected.
func (s *frameScanner) payload(n int64) error {
	if n < 0 || n > s.maxPay {
		return fmt.Errorf("%w: msgpack payload of %d bytes, more than %d", ErrFrameRefused, n, s.maxPay)
	}
	if s.next() == kindKey {
		if n > maxKeyLen {
			return fmt.Errorf("%w: a field name of %d bytes", ErrFrameRefused, n)
		}
		s.key, s.inKey = s.key[:0], true
	}
	if n == 0 {
		return s.valueDone()
	}
	s.skip = n
	return nil
}

// intValue notes an integer value: the Size of an InstallSnapshot.
func (s *frameScanner) intValue(v int64) {
	if s.rpcType == rpcInstallSnapshot && len(s.stack) == 2 {
		if top := &s.stack[1]; top.schema[top.field].name == "Size" {
			s.snapSize = v
		}
	}
}

// valueDone closes the value just completed and every container it
// completes; at the end of the request it resets for the next one. A
// completed field name must name a field of its map not seen before.
func (s *frameScanner) valueDone() error {
	if s.inKey {
		s.inKey = false
		top := &s.stack[len(s.stack)-1]
		i := top.schema.index(s.key)
		switch {
		case i < 0:
			return fmt.Errorf("%w: unknown field %q", ErrFrameRefused, s.key)
		case top.seen&(1<<i) != 0:
			return fmt.Errorf("%w: field %q twice", ErrFrameRefused, s.key)
		}
		top.seen |= 1 << i
		top.field = i
	}
	for len(s.stack) > 0 {
		top := len(s.stack) - 1
		s.stack[top].left--
		if s.stack[top].left > 0 {
			return nil
		}
		s.stack = s.stack[:top]
	}
	// the request is complete
	s.inFrame = false
	if s.rpcType == rpcInstallSnapshot && s.snapSize > 0 {
		s.snapshot = s.snapSize
	}
	return nil
}
