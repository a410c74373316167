package epoch_test

import (
	"bytes"
	"crypto/ed25519"
	"testing"

	"github.com/termfence/termfence/epoch"
)

func FuzzParse(f *testing.F) {
	f.Add("prod/34/node-b")
	f.Add("p/18446744073709551615/l")
	f.Add("p/281474976710656/l") // MaxTerm
	f.Add("p/034/l")
	f.Fuzz(func(t *testing.T, s string) {
		e, err := epoch.Parse(s)
		if err != nil {
			return
		}
		if e.String() != s {
			t.Fatalf("Parse(%q) = %v, which prints as %q: not canonical", s, e, e.String())
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("Parse accepted invalid %v: %v", e, err)
		}
	})
}

func FuzzUnmarshalBinary(f *testing.F) {
	b, _ := epoch.Epoch{Cluster: "prod", Term: 34, Leader: "node-b"}.MarshalBinary()
	f.Add(b)
	f.Add([]byte{1, 0x80, 0x01, 1, 'c', 1, 'l'})
	f.Fuzz(func(t *testing.T, b []byte) {
		var e epoch.Epoch
		if err := e.UnmarshalBinary(b); err != nil {
			return
		}
		again, err := e.MarshalBinary()
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("UnmarshalBinary(%x) = %v, which marshals to %x, %v", b, e, again, err)
		}
	})
}

func FuzzVerify(f *testing.F) {
	h, _ := epoch.NewHMAC(bytes.Repeat([]byte("k"), 32))
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize))
	ed := epoch.NewEd25519Verifier(priv.Public().(ed25519.PublicKey))
	e := epoch.Epoch{Cluster: "prod", Term: 34, Leader: "node-b"}
	ht, _ := h.Sign(e)
	et, _ := epoch.NewEd25519Signer(priv).Sign(e)
	f.Add(ht)
	f.Add(et)
	f.Add(e.String())
	f.Fuzz(func(t *testing.T, tok string) {
		for _, v := range []epoch.Verifier{epoch.Plain(), h, ed} {
			got, err := v.Verify(tok)
			if err != nil {
				continue
			}
			if err := got.Validate(); err != nil {
				t.Fatalf("Verify(%q) returned invalid %v", tok, got)
			}
		}
		// Only the two genuine signed tokens verify with a signing verifier.
		if _, err := h.Verify(tok); err == nil && tok != ht {
			t.Fatalf("hmac verified a token it did not sign: %q", tok)
		}
		if _, err := ed.Verify(tok); err == nil && tok != et {
			t.Fatalf("ed25519 verified a token it did not sign: %q", tok)
		}
	})
}
