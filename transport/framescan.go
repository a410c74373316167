package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrFrameRefused is wrapped when an inbound connection sends a request
// that breaks the decoding caps (Config.MaxRPCSize, Config.MaxRPCEntries):
// the connection is closed before raft's decoder sees the offending bytes.
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
	// map holds a header map and an array of entries, each a map.
	maxDepth = 8
	// itemsPerEntry bounds the msgpack items one log entry may take (a map
	// of at most 6 fields is 13 items); the items of a request may number
	// at most itemsPerEntry*MaxRPCEntries + itemsSlack.
	itemsPerEntry = 16
	itemsSlack    = 256
)

// frameScanner follows the msgpack structure of the request bytes an
// inbound connection sends, before raft's decoder sees them, and refuses
// (with an error wrapping ErrFrameRefused) a request larger than maxSize
// bytes, a string or byte slice longer than maxPay, a container (array or map) of more than maxLen elements, more
// than maxItems items in one request, nesting deeper than maxDepth, or a
// byte msgpack leaves unused. So raft's decoder, which allocates a struct
// per array element it is told exists, only ever sees a request whose
// decoding costs memory in proportion to its size.
//
// It reads no value it does not need: the payload of a string, binary or
// extension is skipped in bulk. The one value it reads is the request's
// top-level "Size" field in an InstallSnapshot, to skip that many bytes of
// snapshot data after the request.
type frameScanner struct {
	maxSize  int64
	maxPay   int64
	maxLen   int64
	maxItems int64

	inFrame  bool
	rpcType  byte
	size     int64   // bytes of the current request so far
	items    int64   // msgpack items of the current request so far
	stack    []int64 // items still to come in each open container
	hdr      [9]byte // a header being collected
	hdrLen   int     // bytes of hdr collected
	hdrNeed  int     // bytes hdr needs (0: none being collected)
	skip     int64   // payload bytes still to skip
	snapshot int64   // snapshot data bytes still to pass after the request

	// For InstallSnapshot: the top-level key being read, and whether the
	// next top-level value is Size.
	key      []byte
	keyNeed  int64 // bytes of key still to come (-1: not collecting)
	nextSize bool
	snapSize int64
}

func newFrameScanner(maxSize, maxPayload int64, maxEntries int) *frameScanner {
	return &frameScanner{maxSize: maxSize, maxPay: maxPayload, maxLen: int64(maxEntries), maxItems: int64(maxEntries)*itemsPerEntry + itemsSlack, keyNeed: -1}
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
			s.inFrame, s.rpcType, s.size, s.items = true, t, 1, 0
			s.stack = append(s.stack[:0], 1) // the request: one value
			s.snapSize, s.nextSize, s.keyNeed = 0, false, -1
			continue
		}
		if s.skip > 0 {
			n := min(int64(len(b)), s.skip)
			if err := s.grow(n); err != nil {
				return err
			}
			if s.keyNeed >= 0 {
				s.key = append(s.key, b[:n]...)
				s.keyNeed -= n
			}
			s.skip -= n
			b = b[n:]
			if s.skip == 0 {
				s.valueDone()
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

// first handles the first byte of a value.
func (s *frameScanner) first(c byte) error {
	s.items++
	if s.items > s.maxItems {
		return fmt.Errorf("%w: request of more than %d msgpack items", ErrFrameRefused, s.maxItems)
	}
	s.hdr[0], s.hdrLen = c, 1
	switch {
	case c <= 0x7f || c >= 0xe0: // fixint
		s.intValue(int64(int8(c)))
		s.valueDone()
		return nil
	case c <= 0x8f:
		return s.open(int64(c&0x0f), true)
	case c <= 0x9f:
		return s.open(int64(c&0x0f), false)
	case c <= 0xbf:
		return s.payload(int64(c&0x1f), true)
	}
	switch c {
	case 0xc0, 0xc2, 0xc3:
		s.valueDone()
		return nil
	case 0xc1:
		return fmt.Errorf("%w: msgpack byte 0xc1", ErrFrameRefused)
	}
	s.hdrNeed = 1 + headerExtra(c)
	return nil
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
	case 0xc7:
		return 2 // length, type
	case 0xc8:
		return 3
	case 0xc9:
		return 5
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8:
		return 1 // type
	}
	return 0
}

// header handles a complete multi-byte header in s.hdr.
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
		return int64(binary.BigEndian.Uint64(h)) // may be negative: only Size reads it
	}
	switch c {
	case 0xcc, 0xcd, 0xce, 0xcf:
		s.intValue(be())
		s.valueDone()
	case 0xd0:
		s.intValue(int64(int8(h[0])))
		s.valueDone()
	case 0xd1:
		s.intValue(int64(int16(binary.BigEndian.Uint16(h))))
		s.valueDone()
	case 0xd2:
		s.intValue(int64(int32(binary.BigEndian.Uint32(h))))
		s.valueDone()
	case 0xd3:
		s.intValue(int64(binary.BigEndian.Uint64(h)))
		s.valueDone()
	case 0xca, 0xcb:
		s.valueDone()
	case 0xc4, 0xc5, 0xc6:
		return s.payload(be(), false)
	case 0xd9, 0xda, 0xdb:
		return s.payload(be(), true)
	case 0xdc, 0xdd:
		return s.open(be(), false)
	case 0xde, 0xdf:
		return s.open(be(), true)
	case 0xc7, 0xc8, 0xc9:
		return s.payload(extLen(h), false)
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8:
		return s.payload(int64(1)<<(c-0xd4), false)
	}
	return nil
}

// extLen is the payload length in the header bytes of an ext8/16/32
// (length, then a type byte).
func extLen(h []byte) int64 {
	switch len(h) {
	case 2:
		return int64(h[0])
	case 3:
		return int64(binary.BigEndian.Uint16(h))
	}
	return int64(binary.BigEndian.Uint32(h))
}

// open starts a container of n elements (a map's pairs: 2n items).
func (s *frameScanner) open(n int64, isMap bool) error {
	if n > s.maxLen {
		return fmt.Errorf("%w: msgpack container of %d elements, more than %d", ErrFrameRefused, n, s.maxLen)
	}
	if isMap {
		n *= 2
	}
	if n == 0 {
		s.valueDone()
		return nil
	}
	if len(s.stack) >= maxDepth {
		return fmt.Errorf("%w: msgpack nested deeper than %d", ErrFrameRefused, maxDepth)
	}
	s.stack = append(s.stack, n)
	return nil
}

// payload starts skipping n bytes of a string, binary or extension
// payload; a top-level key of an InstallSnapshot is collected.
func (s *frameScanner) payload(n int64, str bool) error {
	if n < 0 || n > s.maxPay {
		return fmt.Errorf("%w: msgpack payload of %d bytes, more than %d", ErrFrameRefused, n, s.maxPay)
	}
	if str && s.rpcType == rpcInstallSnapshot && s.atTopKey() && n <= 8 {
		s.key, s.keyNeed = s.key[:0], n
	}
	if n == 0 {
		s.valueDone()
		return nil
	}
	s.skip = n
	return nil
}

// atTopKey reports whether the next value is a key of the request map.
func (s *frameScanner) atTopKey() bool {
	return len(s.stack) == 2 && s.stack[1]%2 == 0
}

// intValue notes an integer value: the Size of an InstallSnapshot.
func (s *frameScanner) intValue(v int64) {
	if s.nextSize && len(s.stack) == 2 && s.stack[1]%2 == 1 {
		s.snapSize = v
	}
}

// valueDone closes the value just completed and every container it
// completes; at the end of the request it resets for the next one.
func (s *frameScanner) valueDone() {
	if s.keyNeed == 0 {
		s.nextSize = string(s.key) == "Size"
		s.keyNeed = -1
	} else if len(s.stack) == 2 && s.stack[1]%2 == 1 {
		s.nextSize = false // a value, not a key: done with it
	}
	for len(s.stack) > 0 {
		top := len(s.stack) - 1
		s.stack[top]--
		if s.stack[top] > 0 {
			return
		}
		s.stack = s.stack[:top]
	}
	// the request is complete
	s.inFrame = false
	if s.rpcType == rpcInstallSnapshot && s.snapSize > 0 {
		s.snapshot = s.snapSize
	}
}
