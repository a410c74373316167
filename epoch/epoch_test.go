package epoch_test

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/quick"

	"go.uber.org/goleak"

	"github.com/termfence/termfence/epoch"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestValidate(t *testing.T) {
	long := strings.Repeat("a", epoch.MaxNameLen)
	tests := []struct {
		name string
		e    epoch.Epoch
		ok   bool
	}{
		{"simple", epoch.Epoch{"prod", 34, "node-b"}, true},
		{"all charset", epoch.Epoch{"A-Za.z_09", 1, "x"}, true},
		{"max names and term", epoch.Epoch{long, epoch.MaxTerm, long}, true},
		{"term above MaxTerm", epoch.Epoch{"prod", epoch.MaxTerm + 1, "a"}, false},
		{"term 2^62", epoch.Epoch{"prod", 1 << 62, "a"}, false},
		{"term 2^63", epoch.Epoch{"prod", 1 << 63, "a"}, false},
		{"term 2^64-1", epoch.Epoch{"prod", math.MaxUint64, "a"}, false},
		{"zero", epoch.Epoch{}, false},
		{"term 0", epoch.Epoch{"prod", 0, "a"}, false},
		{"empty cluster", epoch.Epoch{"", 1, "a"}, false},
		{"empty leader", epoch.Epoch{"prod", 1, ""}, false},
		{"long cluster", epoch.Epoch{long + "a", 1, "a"}, false},
		{"long leader", epoch.Epoch{"p", 1, long + "a"}, false},
		{"slash", epoch.Epoch{"a/b", 1, "a"}, false},
		{"colon", epoch.Epoch{"a", 1, "a:b"}, false},
		{"space", epoch.Epoch{"a b", 1, "a"}, false},
		{"unicode", epoch.Epoch{"prod", 1, "nöde"}, false},
		{"nul", epoch.Epoch{"prod\x00", 1, "a"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.e.Validate()
			if tt.ok && err != nil {
				t.Fatalf("Validate(%#v) = %v, want nil", tt.e, err)
			}
			if !tt.ok && !errors.Is(err, epoch.ErrMalformed) {
				t.Fatalf("Validate(%#v) = %v, want ErrMalformed", tt.e, err)
			}
		})
	}
}

func TestCompare(t *testing.T) {
	a := epoch.Epoch{"c", 33, "a"}
	b := epoch.Epoch{"c", 34, "b"}
	if got := a.Compare(b); got != -1 {
		t.Errorf("33 vs 34 = %d, want -1", got)
	}
	if got := b.Compare(a); got != 1 {
		t.Errorf("34 vs 33 = %d, want 1", got)
	}
	if got := a.Compare(epoch.Epoch{"other", 33, "z"}); got != 0 {
		t.Errorf("equal terms = %d, want 0", got)
	}
	if allocs := testing.AllocsPerRun(100, func() { _ = a.Compare(b) }); allocs != 0 {
		t.Errorf("Compare allocates %v times", allocs)
	}
	if !(epoch.Epoch{}).IsZero() || a.IsZero() {
		t.Error("IsZero wrong")
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want epoch.Epoch
		ok   bool
	}{
		{"prod/34/node-b", epoch.Epoch{"prod", 34, "node-b"}, true},
		{"p/281474976710656/l", epoch.Epoch{"p", epoch.MaxTerm, "l"}, true},
		{"p/281474976710657/l", epoch.Epoch{}, false},
		{"p/9223372036854775808/l", epoch.Epoch{}, false},
		{"p/18446744073709551615/l", epoch.Epoch{}, false},
		{"p/18446744073709551616/l", epoch.Epoch{}, false},
		{"p/99999999999999999999/l", epoch.Epoch{}, false},
		{"p/034/l", epoch.Epoch{}, false},
		{"p/0/l", epoch.Epoch{}, false},
		{"p/+3/l", epoch.Epoch{}, false},
		{"p/-3/l", epoch.Epoch{}, false},
		{"p/3 /l", epoch.Epoch{}, false},
		{"p/3/l/x", epoch.Epoch{}, false},
		{"p/3", epoch.Epoch{}, false},
		{"p//l", epoch.Epoch{}, false},
		{"/3/l", epoch.Epoch{}, false},
		{"p/3/", epoch.Epoch{}, false},
		{"", epoch.Epoch{}, false},
		{" p/3/l", epoch.Epoch{}, false},
		{"p/0x3/l", epoch.Epoch{}, false},
		{strings.Repeat("a", 2000), epoch.Epoch{}, false},
	}
	for _, tt := range tests {
		got, err := epoch.Parse(tt.in)
		if tt.ok {
			if err != nil || got != tt.want {
				t.Errorf("Parse(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
			continue
		}
		if !errors.Is(err, epoch.ErrMalformed) {
			t.Errorf("Parse(%q) = %v, %v; want ErrMalformed", tt.in, got, err)
		}
	}
}

// randomEpoch draws a valid epoch.
func randomEpoch(r *rand.Rand) epoch.Epoch {
	const chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
	name := func() string {
		b := make([]byte, 1+r.IntN(epoch.MaxNameLen))
		for i := range b {
			b[i] = chars[r.IntN(len(chars))]
		}
		return string(b)
	}
	term := r.Uint64() >> (64 - 49 + r.IntN(49)) // 0..2^49-1
	if term == 0 || term > epoch.MaxTerm {
		term = 1 + term%epoch.MaxTerm
	}
	return epoch.Epoch{Cluster: name(), Term: term, Leader: name()}
}

func TestRoundTrips(t *testing.T) {
	cfg := &quick.Config{MaxCount: 2000}
	prop := func(seed uint64) bool {
		e := randomEpoch(rand.New(rand.NewPCG(seed, seed^0x9e3779b9)))
		if p, err := epoch.Parse(e.String()); err != nil || p != e {
			t.Logf("text: %v -> %v, %v", e, p, err)
			return false
		}
		txt, err := e.MarshalText()
		if err != nil || string(txt) != e.String() {
			return false
		}
		var u epoch.Epoch
		if err := u.UnmarshalText(txt); err != nil || u != e {
			return false
		}
		bin, err := e.MarshalBinary()
		if err != nil {
			return false
		}
		var v epoch.Epoch
		if err := v.UnmarshalBinary(bin); err != nil || v != e {
			t.Logf("binary: %v -> %v, %v", e, v, err)
			return false
		}
		return true
	}
	if err := quick.Check(prop, cfg); err != nil {
		t.Fatal(err)
	}
}

func TestMarshalRefusesInvalid(t *testing.T) {
	bad := epoch.Epoch{Cluster: "c", Leader: "l"}
	if _, err := bad.MarshalText(); !errors.Is(err, epoch.ErrMalformed) {
		t.Errorf("MarshalText = %v", err)
	}
	if _, err := bad.MarshalBinary(); !errors.Is(err, epoch.ErrMalformed) {
		t.Errorf("MarshalBinary = %v", err)
	}
}

func TestUnmarshalBinary(t *testing.T) {
	good, _ := epoch.Epoch{"c", 300, "l"}.MarshalBinary()
	tests := map[string][]byte{
		"empty":        {},
		"version":      append([]byte{2}, good[1:]...),
		"truncated":    good[:len(good)-1],
		"trailing":     append(append([]byte{}, good...), 0),
		"long varint":  {1, 0x80 | 44, 0x82, 0x00, 1, 'c', 1, 'l'}, // 300 in a non-minimal 3 bytes
		"term 0":       {1, 0, 1, 'c', 1, 'l'},
		"bad name":     {1, 1, 1, '/', 1, 'l'},
		"length past":  {1, 1, 200, 'c'},
		"varint 11 b":  {1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 1, 'c', 1, 'l'},
		"oversized":    bytes.Repeat([]byte{1}, epoch.MaxTokenLen+1),
		"empty leader": {1, 1, 1, 'c', 0},
	}
	for name, b := range tests {
		var e epoch.Epoch
		if err := e.UnmarshalBinary(b); !errors.Is(err, epoch.ErrMalformed) {
			t.Errorf("%s: UnmarshalBinary(%x) = %v (%v), want ErrMalformed", name, b, err, e)
		}
		if !e.IsZero() {
			t.Errorf("%s: failed decode changed the receiver to %v", name, e)
		}
	}
}
