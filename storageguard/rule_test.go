package storageguard_test

import (
	"errors"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

func ep(term uint64, leader string) epoch.Epoch {
	return epoch.Epoch{Cluster: "payments", Term: term, Leader: leader}
}

func TestDecideTable(t *testing.T) {
	zero := epoch.Epoch{}
	e33 := ep(33, "node-a")
	e34 := ep(34, "node-b")
	cases := []struct {
		name      string
		resource  string
		highest   epoch.Epoch
		presented epoch.Epoch
		want      storageguard.Decision
		wantErr   error
	}{
		{"first epoch raises", "r", zero, e33, storageguard.Decision{Highest: e33, Raise: true}, nil},
		{"newer term raises", "r", e33, e34, storageguard.Decision{Highest: e34, Raise: true}, nil},
		{"same epoch no raise", "r", e34, e34, storageguard.Decision{Highest: e34}, nil},
		{"older term stale", "r", e34, e33, storageguard.Decision{}, storageguard.ErrStale},
		{"much older term stale", "r", ep(1<<40, "x"), ep(1, "x"), storageguard.Decision{}, storageguard.ErrStale},
		{"same term other leader conflicts", "r", e34, ep(34, "node-c"), storageguard.Decision{}, storageguard.ErrConflict},
		{"other cluster foreign", "r", e34, epoch.Epoch{Cluster: "billing", Term: 99, Leader: "node-b"}, storageguard.Decision{}, storageguard.ErrForeignCluster},
		{"other cluster older foreign, not stale", "r", e34, epoch.Epoch{Cluster: "billing", Term: 1, Leader: "node-b"}, storageguard.Decision{}, storageguard.ErrForeignCluster},
		{"zero presented malformed", "r", e34, zero, storageguard.Decision{}, epoch.ErrMalformed},
		{"zero term malformed", "r", zero, epoch.Epoch{Cluster: "payments", Leader: "a"}, storageguard.Decision{}, epoch.ErrMalformed},
		{"bad leader malformed", "r", zero, epoch.Epoch{Cluster: "payments", Term: 3, Leader: "a/b"}, storageguard.Decision{}, epoch.ErrMalformed},
		{"term above MaxTerm malformed", "r", e34, ep(epoch.MaxTerm+1, "x"), storageguard.Decision{}, epoch.ErrMalformed},
		{"term 2^64-1 malformed, also as the first epoch", "r", zero, ep(1<<64-1, "x"), storageguard.Decision{}, epoch.ErrMalformed},
		{"MaxTerm raises", "r", e34, ep(epoch.MaxTerm, "x"), storageguard.Decision{Highest: ep(epoch.MaxTerm, "x"), Raise: true}, nil},
		{"empty resource", "", zero, e33, storageguard.Decision{}, storageguard.ErrBadResource},
		{"long resource", strings.Repeat("x", storageguard.MaxResourceLen+1), zero, e33, storageguard.Decision{}, storageguard.ErrBadResource},
		{"longest resource ok", strings.Repeat("x", storageguard.MaxResourceLen), zero, e33, storageguard.Decision{Highest: e33, Raise: true}, nil},
		{"any bytes resource ok", "../../etc/passwd\x00\xff", zero, e33, storageguard.Decision{Highest: e33, Raise: true}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := storageguard.Decide(c.resource, c.highest, c.presented)
			if !errors.Is(err, c.wantErr) || (c.wantErr == nil) != (err == nil) {
				t.Fatalf("Decide error = %v, want %v", err, c.wantErr)
			}
			if got != c.want {
				t.Fatalf("Decide = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestDecideErrorsCarryData(t *testing.T) {
	e33, e34 := ep(33, "node-a"), ep(34, "node-b")
	_, err := storageguard.Decide("ledger", e34, e33)
	var se *storageguard.StaleError
	if !errors.As(err, &se) || se.Resource != "ledger" || se.Presented != e33 || se.Highest != e34 {
		t.Fatalf("stale error = %#v", err)
	}
	_, err = storageguard.Decide("ledger", e34, ep(34, "node-z"))
	var ce *storageguard.ConflictError
	if !errors.As(err, &ce) || ce.Highest != e34 || ce.Presented.Leader != "node-z" {
		t.Fatalf("conflict error = %#v", err)
	}
	foreign := epoch.Epoch{Cluster: "billing", Term: 40, Leader: "n"}
	_, err = storageguard.Decide("ledger", e34, foreign)
	var fe *storageguard.ForeignError
	if !errors.As(err, &fe) || fe.Cluster != "payments" || fe.Presented != foreign {
		t.Fatalf("foreign error = %#v", err)
	}
}

// genEpoch draws epochs from a small space so that equal terms, other
// leaders and other clusters all come up often.
func genEpoch() *rapid.Generator[epoch.Epoch] {
	return rapid.Custom(func(t *rapid.T) epoch.Epoch {
		if rapid.IntRange(0, 30).Draw(t, "zero") == 0 {
			return epoch.Epoch{}
		}
		return epoch.Epoch{
			Cluster: rapid.SampledFrom([]string{"c1", "c2"}).Draw(t, "cluster"),
			Term:    rapid.Uint64Range(0, 8).Draw(t, "term"),
			Leader:  rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "leader"),
		}
	})
}

// TestDecideProperties checks the rule's algebra on random inputs, and that
// a history of decisions behaves like a fence: the highest never decreases,
// never changes cluster, and every accepted epoch is >= everything accepted
// before it.
func TestDecideProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h, p := genEpoch().Draw(t, "highest"), genEpoch().Draw(t, "presented")
		if !h.IsZero() && h.Validate() != nil {
			t.Skip("highest must be zero or valid: a fence only stores admitted epochs")
		}
		d, err := storageguard.Decide("r", h, p)
		switch {
		case p.Validate() != nil:
			if !errors.Is(err, epoch.ErrMalformed) {
				t.Fatalf("invalid presented %v: err = %v", p, err)
			}
		case h.IsZero():
			if err != nil || !d.Raise || d.Highest != p {
				t.Fatalf("first epoch: %+v %v", d, err)
			}
		case p.Cluster != h.Cluster:
			if !errors.Is(err, storageguard.ErrForeignCluster) {
				t.Fatalf("foreign: %v", err)
			}
		case p.Term < h.Term:
			if !errors.Is(err, storageguard.ErrStale) {
				t.Fatalf("stale: %v", err)
			}
		case p.Term > h.Term:
			if err != nil || !d.Raise || d.Highest != p {
				t.Fatalf("newer: %+v %v", d, err)
			}
		case p.Leader != h.Leader:
			if !errors.Is(err, storageguard.ErrConflict) {
				t.Fatalf("conflict: %v", err)
			}
		default:
			if err != nil || d.Raise || d.Highest != h {
				t.Fatalf("same: %+v %v", d, err)
			}
		}
		if err != nil && d != (storageguard.Decision{}) {
			t.Fatalf("refusal with a decision: %+v", d)
		}
		// Idempotence: presenting the new highest again is accepted, no raise.
		if err == nil {
			d2, err2 := storageguard.Decide("r", d.Highest, p)
			if err2 != nil || d2.Raise || d2.Highest != d.Highest {
				t.Fatalf("re-presenting %v after admission: %+v %v", p, d2, err2)
			}
		}
	})
}

func TestDecideHistory(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var highest epoch.Epoch
		var accepted []epoch.Epoch
		n := rapid.IntRange(1, 40).Draw(t, "n")
		for i := 0; i < n; i++ {
			p := genEpoch().Draw(t, "p")
			d, err := storageguard.Decide("r", highest, p)
			if err != nil {
				continue
			}
			if !highest.IsZero() && (d.Highest.Term < highest.Term || d.Highest.Cluster != highest.Cluster) {
				t.Fatalf("highest went from %v to %v", highest, d.Highest)
			}
			if d.Raise != (d.Highest != highest) {
				t.Fatalf("Raise = %v but highest %v -> %v", d.Raise, highest, d.Highest)
			}
			for _, a := range accepted {
				if p.Term < a.Term {
					t.Fatalf("accepted %v after %v", p, a)
				}
				if p.Term == a.Term && p != a {
					t.Fatalf("accepted %v and %v for one term", a, p)
				}
			}
			accepted = append(accepted, p)
			highest = d.Highest
		}
	})
}
