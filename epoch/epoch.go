package epoch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

// MaxNameLen is the longest Cluster or Leader name, in bytes.
const MaxNameLen = 64

// MaxTokenLen caps every text, binary or token input, in bytes. Longer input
// is refused before any parsing or cryptography.
const MaxTokenLen = 1024

// MaxTerm is the highest term a valid Epoch may carry: 2^48, about 2.8e14.
//
// Raft raises its term by one per election. A cluster that held an election
// every 5 ms (hashicorp/raft's shortest timeout) without pause would need
// about 45,000 years to reach MaxTerm; real clusters elect a few times a day.
// Yet it is 2^15 times below 2^63, so a term never comes near what a signed
// 64-bit integer (SQL BIGINT, most JSON consumers stop exactly at 2^53) or
// uint64 arithmetic can hold. A term above it can only come from a forged or
// corrupted message — one message with term 2^63 or 2^64−1 would otherwise
// lock a fence against every real leader for good, or wrap the term to 0 —
// so Validate refuses it, and with it Parse, the binary form, every codec
// and every fence; package election refuses any Raft RPC that carries one.
const MaxTerm uint64 = 1 << 48

// binaryVersion is the first byte of the binary form.
const binaryVersion = 1

var (
	// ErrMalformed is returned for text, binary or token input that cannot be
	// decoded, and for an Epoch that fails Validate.
	ErrMalformed = errors.New("epoch: malformed")
	// ErrBadSignature is returned when a signed token's signature does not
	// verify under any configured key: the token was changed or forged, or was
	// signed with another key or algorithm.
	ErrBadSignature = errors.New("epoch: bad signature")
	// ErrUnsigned is returned when a verifier that requires signatures is given
	// an unsigned (plain) token.
	ErrUnsigned = errors.New("epoch: unsigned token")
)

// Epoch is a fencing token: the Raft term that Leader won in the election
// group Cluster. The zero Epoch is not valid; it stands for "none".
type Epoch struct {
	Cluster string // election group; [A-Za-z0-9._-], 1..64 bytes
	Term    uint64 // Raft term that Leader won; > 0
	Leader  string // Raft server ID of that term's leader; same charset
}

// Compare orders epochs by Term: -1 if e is older than o, +1 if newer, 0 if
// the terms are equal. It does not look at Cluster or Leader; deciding what an
// equal term with another leader means is the fence's job.
func (e Epoch) Compare(o Epoch) int {
	switch {
	case e.Term < o.Term:
		return -1
	case e.Term > o.Term:
		return 1
	}
	return 0
}

// IsZero reports whether e is the zero Epoch.
func (e Epoch) IsZero() bool { return e == Epoch{} }

// Validate reports whether e is a well-formed epoch: Term in 1..MaxTerm and
// both names 1..64 bytes of [A-Za-z0-9._-]. The error wraps ErrMalformed.
func (e Epoch) Validate() error {
	if e.Term == 0 {
		return fmt.Errorf("%w: term is 0", ErrMalformed)
	}
	if e.Term > MaxTerm {
		return fmt.Errorf("%w: term %d is above MaxTerm (%d)", ErrMalformed, e.Term, MaxTerm)
	}
	if err := ValidateName(e.Cluster); err != nil {
		return fmt.Errorf("%w: cluster: %v", ErrMalformed, err)
	}
	if err := ValidateName(e.Leader); err != nil {
		return fmt.Errorf("%w: leader: %v", ErrMalformed, err)
	}
	return nil
}

// ValidateName reports whether s can be a Cluster or Leader name: 1 to
// MaxNameLen bytes of ASCII letters, digits, '.', '_' and '-'.
func ValidateName(s string) error {
	if s == "" {
		return errors.New("empty name")
	}
	if len(s) > MaxNameLen {
		return fmt.Errorf("name is %d bytes, more than %d", len(s), MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		if !nameByte(s[i]) {
			return fmt.Errorf("name has byte %q at %d, outside [A-Za-z0-9._-]", s[i], i)
		}
	}
	return nil
}

func nameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '.' || c == '_' || c == '-'
}

// String returns the canonical text form "cluster/term/leader". For an
// invalid epoch it still returns a readable string, which Parse refuses.
func (e Epoch) String() string {
	if e.IsZero() {
		return "" // no epoch: not "/0/"
	}
	return string(e.appendText(make([]byte, 0, len(e.Cluster)+len(e.Leader)+22)))
}

func (e Epoch) appendText(b []byte) []byte {
	b = append(b, e.Cluster...)
	b = append(b, '/')
	b = strconv.AppendUint(b, e.Term, 10)
	b = append(b, '/')
	return append(b, e.Leader...)
}

// Parse decodes the canonical text form produced by String. Any other
// spelling is refused with an error wrapping ErrMalformed.
func Parse(s string) (Epoch, error) {
	if len(s) > MaxTokenLen {
		return Epoch{}, fmt.Errorf("%w: %d bytes, more than %d", ErrMalformed, len(s), MaxTokenLen)
	}
	i := indexByte(s, '/')
	if i < 0 {
		return Epoch{}, fmt.Errorf("%w: %q is not cluster/term/leader", ErrMalformed, s)
	}
	j := indexByte(s[i+1:], '/')
	if j < 0 {
		return Epoch{}, fmt.Errorf("%w: %q is not cluster/term/leader", ErrMalformed, s)
	}
	j += i + 1
	term, err := parseTerm(s[i+1 : j])
	if err != nil {
		return Epoch{}, err
	}
	e := Epoch{Cluster: s[:i], Term: term, Leader: s[j+1:]}
	if err := e.Validate(); err != nil {
		return Epoch{}, err
	}
	return e, nil
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// parseTerm accepts only canonical decimal: digits, no sign, no leading zero.
func parseTerm(s string) (uint64, error) {
	if s == "" || len(s) > 20 || (s[0] == '0' && len(s) > 1) {
		return 0, fmt.Errorf("%w: term %q is not canonical decimal", ErrMalformed, s)
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: term %q is not canonical decimal", ErrMalformed, s)
		}
		d := uint64(c - '0')
		if n > (1<<64-1-d)/10 {
			return 0, fmt.Errorf("%w: term %q overflows uint64", ErrMalformed, s)
		}
		n = n*10 + d
	}
	return n, nil
}

// MarshalText implements encoding.TextMarshaler with the canonical text form.
// It refuses an invalid epoch.
func (e Epoch) MarshalText() ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return e.appendText(nil), nil
}

// UnmarshalText implements encoding.TextUnmarshaler; see Parse.
func (e *Epoch) UnmarshalText(b []byte) error {
	p, err := Parse(string(b))
	if err != nil {
		return err
	}
	*e = p
	return nil
}

// MarshalBinary implements encoding.BinaryMarshaler: a version byte, the term
// as a uvarint, then each name prefixed by its length in one byte.
func (e Epoch) MarshalBinary() ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	b := make([]byte, 0, 1+binary.MaxVarintLen64+2+len(e.Cluster)+len(e.Leader))
	b = append(b, binaryVersion)
	b = binary.AppendUvarint(b, e.Term)
	b = append(b, byte(len(e.Cluster)))
	b = append(b, e.Cluster...)
	b = append(b, byte(len(e.Leader)))
	b = append(b, e.Leader...)
	return b, nil
}

// UnmarshalBinary implements encoding.BinaryUnmarshaler. It refuses unknown
// versions, truncated or trailing bytes, non-minimal varints and invalid
// epochs with an error wrapping ErrMalformed.
func (e *Epoch) UnmarshalBinary(b []byte) error {
	if len(b) > MaxTokenLen {
		return fmt.Errorf("%w: %d bytes, more than %d", ErrMalformed, len(b), MaxTokenLen)
	}
	if len(b) == 0 {
		return fmt.Errorf("%w: empty binary epoch", ErrMalformed)
	}
	if b[0] != binaryVersion {
		return fmt.Errorf("%w: unknown binary version %d", ErrMalformed, b[0])
	}
	b = b[1:]
	term, n := binary.Uvarint(b)
	if n <= 0 || n != uvarintLen(term) {
		return fmt.Errorf("%w: bad term varint", ErrMalformed)
	}
	b = b[n:]
	cluster, b, ok := lenPrefixed(b)
	if !ok {
		return fmt.Errorf("%w: truncated cluster", ErrMalformed)
	}
	leader, b, ok := lenPrefixed(b)
	if !ok {
		return fmt.Errorf("%w: truncated leader", ErrMalformed)
	}
	if len(b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(b))
	}
	p := Epoch{Cluster: cluster, Term: term, Leader: leader}
	if err := p.Validate(); err != nil {
		return err
	}
	*e = p
	return nil
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

func lenPrefixed(b []byte) (string, []byte, bool) {
	if len(b) < 1 || len(b)-1 < int(b[0]) {
		return "", nil, false
	}
	n := int(b[0])
	return string(b[1 : 1+n]), b[1+n:], true
}
