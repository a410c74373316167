package epoch_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/termfence/termfence/epoch"
)

var (
	e34   = epoch.Epoch{Cluster: "prod", Term: 34, Leader: "node-b"}
	key32 = bytes.Repeat([]byte("k"), 32)
)

func mustHMAC(t testing.TB, key []byte) epoch.Codec {
	t.Helper()
	c, err := epoch.NewHMAC(key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func edKey(t testing.TB, seed byte) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
	return priv.Public().(ed25519.PublicKey), priv
}

type codecCase struct {
	name string
	s    epoch.Signer
	v    epoch.Verifier
}

func signingCodecs(t testing.TB) []codecCase {
	pub, priv := edKey(t, 1)
	h := mustHMAC(t, key32)
	return []codecCase{
		{"hmac", h, h},
		{"ed25519", epoch.NewEd25519Signer(priv), epoch.NewEd25519Verifier(pub)},
	}
}

func TestSignVerifyRoundTrip(t *testing.T) {
	cases := append(signingCodecs(t), codecCase{"plain", epoch.Plain(), epoch.Plain()})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tok, err := c.s.Sign(e34)
			if err != nil {
				t.Fatal(err)
			}
			if len(tok) > epoch.MaxTokenLen || strings.ContainsAny(tok, " \t\r\n") {
				t.Fatalf("token %q does not fit a header", tok)
			}
			got, err := c.v.Verify(tok)
			if err != nil || got != e34 {
				t.Fatalf("Verify(%q) = %v, %v", tok, got, err)
			}
			if _, err := c.s.Sign(epoch.Epoch{Cluster: "c", Leader: "l"}); !errors.Is(err, epoch.ErrMalformed) {
				t.Fatalf("Sign(term 0) = %v, want ErrMalformed", err)
			}
		})
	}
}

func TestPlainTokenIsTextForm(t *testing.T) {
	tok, err := epoch.Plain().Sign(e34)
	if err != nil || tok != "prod/34/node-b" {
		t.Fatalf("Plain().Sign = %q, %v", tok, err)
	}
}

// TestTamper changes every byte of a signed token to every other printable
// byte and expects each result to be refused.
func TestTamper(t *testing.T) {
	for _, c := range signingCodecs(t) {
		t.Run(c.name, func(t *testing.T) {
			tok, err := c.s.Sign(e34)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < len(tok); i++ {
				for b := byte(0x21); b < 0x7f; b++ {
					if b == tok[i] {
						continue
					}
					forged := tok[:i] + string(b) + tok[i+1:]
					if got, err := c.v.Verify(forged); err == nil {
						t.Fatalf("byte %d -> %q: forged token %q verified as %v", i, b, forged, got)
					}
				}
			}
			for _, forged := range []string{tok[:len(tok)-1], tok + "A", tok + ":x", ""} {
				if got, err := c.v.Verify(forged); err == nil {
					t.Fatalf("forged token %q verified as %v", forged, got)
				}
			}
		})
	}
}

func TestUnsignedRefused(t *testing.T) {
	for _, c := range signingCodecs(t) {
		if _, err := c.v.Verify(e34.String()); !errors.Is(err, epoch.ErrUnsigned) {
			t.Errorf("%s: Verify(plain) = %v, want ErrUnsigned", c.name, err)
		}
		if _, err := c.v.Verify("not a token"); !errors.Is(err, epoch.ErrMalformed) {
			t.Errorf("%s: Verify(garbage) = %v, want ErrMalformed", c.name, err)
		}
	}
}

func TestWrongKey(t *testing.T) {
	other := mustHMAC(t, bytes.Repeat([]byte("x"), 32))
	tok, _ := other.Sign(e34)
	if _, err := mustHMAC(t, key32).Verify(tok); !errors.Is(err, epoch.ErrBadSignature) {
		t.Errorf("hmac wrong key: %v, want ErrBadSignature", err)
	}
	pub1, _ := edKey(t, 1)
	_, priv2 := edKey(t, 2)
	tok, _ = epoch.NewEd25519Signer(priv2).Sign(e34)
	if _, err := epoch.NewEd25519Verifier(pub1).Verify(tok); !errors.Is(err, epoch.ErrBadSignature) {
		t.Errorf("ed25519 wrong key: %v, want ErrBadSignature", err)
	}
	// A token for one algorithm never verifies under the other.
	htok, _ := mustHMAC(t, key32).Sign(e34)
	if _, err := epoch.NewEd25519Verifier(pub1).Verify(htok); !errors.Is(err, epoch.ErrBadSignature) {
		t.Errorf("hmac token to ed25519 verifier: %v", err)
	}
	if _, err := mustHMAC(t, key32).Verify(tok); !errors.Is(err, epoch.ErrBadSignature) {
		t.Errorf("ed25519 token to hmac verifier: %v", err)
	}
}

func TestEd25519Rotation(t *testing.T) {
	pubOld, privOld := edKey(t, 1)
	pubNew, privNew := edKey(t, 2)
	v := epoch.NewEd25519Verifier(pubOld, pubNew)
	for _, priv := range []ed25519.PrivateKey{privOld, privNew} {
		tok, err := epoch.NewEd25519Signer(priv).Sign(e34)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := v.Verify(tok); err != nil || got != e34 {
			t.Fatalf("rotation: %v, %v", got, err)
		}
	}
	// After the old key is retired, its tokens are refused.
	tok, _ := epoch.NewEd25519Signer(privOld).Sign(e34)
	if _, err := epoch.NewEd25519Verifier(pubNew).Verify(tok); !errors.Is(err, epoch.ErrBadSignature) {
		t.Fatalf("retired key: %v", err)
	}
}

func TestBadKeys(t *testing.T) {
	if _, err := epoch.NewHMAC(make([]byte, 31)); err == nil {
		t.Error("NewHMAC accepted a 31-byte key")
	}
	if _, err := epoch.NewEd25519Signer(ed25519.PrivateKey{1, 2, 3}).Sign(e34); err == nil {
		t.Error("short ed25519 private key signed")
	}
	pub, priv := edKey(t, 1)
	tok, _ := epoch.NewEd25519Signer(priv).Sign(e34)
	if _, err := epoch.NewEd25519Verifier(ed25519.PublicKey{1}).Verify(tok); !errors.Is(err, epoch.ErrBadSignature) {
		t.Errorf("verifier with no usable key: %v", err)
	}
	if _, err := epoch.NewEd25519Verifier(ed25519.PublicKey{1}, pub).Verify(tok); err != nil {
		t.Errorf("bad key beside a good one: %v", err)
	}
}

func TestHMACKeyCopied(t *testing.T) {
	key := bytes.Repeat([]byte("k"), 32)
	c := mustHMAC(t, key)
	tok, _ := c.Sign(e34)
	key[0] = 'z'
	if _, err := c.Verify(tok); err != nil {
		t.Fatalf("changing the caller's key slice changed the codec: %v", err)
	}
}

func TestVerifyMalformed(t *testing.T) {
	h := mustHMAC(t, key32)
	pub, _ := edKey(t, 1)
	verifiers := map[string]epoch.Verifier{"plain": epoch.Plain(), "hmac": h, "ed25519": epoch.NewEd25519Verifier(pub)}
	inputs := []string{
		"", ":", "tf1:", "tf1::", "tf1:hs256:", "tf1:hs256:prod/34/node-b:",
		"tf2:hs256:prod/34/node-b:AAAA", "x:y", strings.Repeat("a", epoch.MaxTokenLen+1),
		"tf1:hs256:prod/34/node-b:" + strings.Repeat("A", epoch.MaxTokenLen),
	}
	for name, v := range verifiers {
		for _, in := range inputs {
			_, err := v.Verify(in)
			if err == nil {
				t.Errorf("%s: Verify(%.40q) succeeded", name, in)
			}
			if !errors.Is(err, epoch.ErrMalformed) && !errors.Is(err, epoch.ErrBadSignature) && !errors.Is(err, epoch.ErrUnsigned) {
				t.Errorf("%s: Verify(%.40q) = %v, want a package sentinel", name, in, err)
			}
		}
	}
}

// TestSignedTermAboveMaxTerm: a token whose signature is valid but whose term
// is above MaxTerm (made by a release without the bound, or with a leaked key)
// is refused as malformed by every verifier, and no signer makes one.
func TestSignedTermAboveMaxTerm(t *testing.T) {
	pub, priv := edKey(t, 1)
	h := mustHMAC(t, key32)
	for _, term := range []uint64{epoch.MaxTerm + 1, 1 << 62, 1 << 63, 1<<64 - 1} {
		huge := epoch.Epoch{Cluster: "prod", Term: term, Leader: "mallory"}
		for name, s := range map[string]epoch.Signer{"plain": epoch.Plain(), "hmac": h, "ed25519": epoch.NewEd25519Signer(priv)} {
			if tok, err := s.Sign(huge); !errors.Is(err, epoch.ErrMalformed) {
				t.Errorf("%s: Sign(term %d) = %q, %v; want ErrMalformed", name, term, tok, err)
			}
		}
		text := huge.String()
		mac := hmac.New(sha256.New, key32)
		mac.Write([]byte("tf1:hs256:" + text))
		toks := map[string]struct {
			v   epoch.Verifier
			tok string
		}{
			"plain":   {epoch.Plain(), text},
			"hmac":    {h, "tf1:hs256:" + text + ":" + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))},
			"ed25519": {epoch.NewEd25519Verifier(pub), "tf1:ed25519:" + text + ":" + base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, []byte("tf1:ed25519:"+text)))},
		}
		for name, c := range toks {
			if got, err := c.v.Verify(c.tok); !errors.Is(err, epoch.ErrMalformed) {
				t.Errorf("%s: Verify(validly signed term %d) = %v, %v; want ErrMalformed", name, term, got, err)
			}
		}
		// The same construction at MaxTerm verifies: the signatures above are right.
		ok := epoch.Epoch{Cluster: "prod", Term: epoch.MaxTerm, Leader: "mallory"}.String()
		mac = hmac.New(sha256.New, key32)
		mac.Write([]byte("tf1:hs256:" + ok))
		if _, err := h.Verify("tf1:hs256:" + ok + ":" + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))); err != nil {
			t.Errorf("hmac: hand-signed MaxTerm token refused: %v", err)
		}
		if _, err := epoch.NewEd25519Verifier(pub).Verify("tf1:ed25519:" + ok + ":" + base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, []byte("tf1:ed25519:"+ok)))); err != nil {
			t.Errorf("ed25519: hand-signed MaxTerm token refused: %v", err)
		}
	}
}

// TestHMACKeyIDs: tokens name their key; a verifier picks the key by that
// name; the signature covers it; tokens of the original form (no key ID)
// still verify under a key without an ID; bad key sets are refused.
func TestHMACKeyIDs(t *testing.T) {
	e := epoch.Epoch{Cluster: "prod", Term: 34, Leader: "node-b"}
	oldKey := epoch.HMACKey{ID: "k2026a", Secret: bytes.Repeat([]byte("o"), 32)}
	newKey := epoch.HMACKey{ID: "k2026b", Secret: bytes.Repeat([]byte("n"), 32)}
	signer, err := epoch.NewHMACKeys(newKey, oldKey)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := signer.Sign(e)
	if err != nil {
		t.Fatal(err)
	}
	if want := "tf1:hs256.k2026b:prod/34/node-b:"; !strings.HasPrefix(tok, want) {
		t.Fatalf("token %q does not start with %q", tok, want)
	}
	for _, v := range []func() (epoch.Verifier, error){
		func() (epoch.Verifier, error) { return epoch.NewHMACVerifier(oldKey, newKey) },
		func() (epoch.Verifier, error) { return epoch.NewHMACVerifier(newKey) },
		func() (epoch.Verifier, error) { return signer, nil },
	} {
		ver, err := v()
		if err != nil {
			t.Fatal(err)
		}
		if got, err := ver.Verify(tok); err != nil || got != e {
			t.Fatalf("Verify = %v, %v", got, err)
		}
	}
	onlyOld, _ := epoch.NewHMACVerifier(oldKey)
	if _, err := onlyOld.Verify(tok); !errors.Is(err, epoch.ErrBadSignature) {
		t.Fatalf("a token of a retired or unknown key: %v, want ErrBadSignature", err)
	}
	// The key ID is signed: naming the other key fails.
	moved := strings.Replace(tok, "hs256.k2026b", "hs256.k2026a", 1)
	if _, err := signer.Verify(moved); !errors.Is(err, epoch.ErrBadSignature) {
		t.Fatalf("a token moved to another key ID: %v, want ErrBadSignature", err)
	}
	// A signing codec refuses a token relabelled to an ID it does not hold,
	// even though its own signing key signed it (docs/TOKEN.md: the key is
	// chosen by the token's ID alone, as the Python and PostgreSQL
	// verifiers choose it).
	for _, unknown := range []string{"hs256.k2026c", "hs256.x"} {
		relabelled := strings.Replace(tok, "hs256.k2026b", unknown, 1)
		if got, err := signer.Verify(relabelled); !errors.Is(err, epoch.ErrBadSignature) {
			t.Fatalf("the signing codec accepted its own token relabelled to %q: %v, %v; want ErrBadSignature", unknown, got, err)
		}
	}
	// Even two IDs of one secret: the signature binds the ID.
	twin, err := epoch.NewHMACKeys(epoch.HMACKey{ID: "a", Secret: key32}, epoch.HMACKey{ID: "b", Secret: key32})
	if err != nil {
		t.Fatal(err)
	}
	ttok, _ := twin.Sign(e)
	if _, err := twin.Verify(strings.Replace(ttok, "hs256.a:", "hs256.b:", 1)); !errors.Is(err, epoch.ErrBadSignature) {
		t.Fatalf("a token moved to another ID of the same secret: %v, want ErrBadSignature", err)
	}
	for _, bad := range []string{"hs256.", "hs256.k/1", "hs256k2026b", "hs256." + strings.Repeat("k", epoch.MaxKeyIDLen+1)} {
		if _, err := signer.Verify(strings.Replace(tok, "hs256.k2026b", bad, 1)); err == nil {
			t.Errorf("algorithm field %q accepted", bad)
		}
	}
	// The original form: NewHMAC's tokens (no key ID) verify under a key
	// with an empty ID, and only there.
	legacy := mustHMAC(t, key32)
	ltok, _ := legacy.Sign(e)
	if !strings.HasPrefix(ltok, "tf1:hs256:prod/34/node-b:") {
		t.Fatalf("NewHMAC token %q changed form", ltok)
	}
	both, err := epoch.NewHMACVerifier(epoch.HMACKey{Secret: key32}, newKey)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := both.Verify(ltok); err != nil || got != e {
		t.Fatalf("a NewHMAC token under its key without ID: %v, %v", got, err)
	}
	if got, err := both.Verify(tok); err != nil || got != e {
		t.Fatalf("a key-ID token beside a key without ID: %v, %v", got, err)
	}
	if _, err := signer.Verify(ltok); !errors.Is(err, epoch.ErrBadSignature) {
		t.Fatalf("a token without key ID under keys that all have one: %v", err)
	}
	// Refused key sets; a verifier does not sign.
	for name, keys := range map[string][]epoch.HMACKey{
		"none":      nil,
		"short":     {{ID: "a", Secret: make([]byte, 31)}},
		"bad ID":    {{ID: "a:b", Secret: key32}},
		"long ID":   {{ID: strings.Repeat("a", epoch.MaxKeyIDLen+1), Secret: key32}},
		"duplicate": {{ID: "a", Secret: key32}, {ID: "a", Secret: bytes.Repeat([]byte("z"), 32)}},
	} {
		if _, err := epoch.NewHMACVerifier(keys...); err == nil {
			t.Errorf("%s: NewHMACVerifier accepted %v", name, keys)
		}
	}
	if _, err := epoch.NewHMACKeys(oldKey, oldKey); err == nil {
		t.Error("NewHMACKeys accepted the signing key twice")
	}
	if s, ok := onlyOld.(epoch.Signer); ok {
		if _, err := s.Sign(e); err == nil {
			t.Error("a verifier signed")
		}
	}
}

// TestValidKeyID: the key ID grammar of docs/TOKEN.md.
func TestValidKeyID(t *testing.T) {
	for id, want := range map[string]bool{
		"k2026a": true, "A_b-9": true, strings.Repeat("a", epoch.MaxKeyIDLen): true,
		"": false, strings.Repeat("a", epoch.MaxKeyIDLen+1): false, "a.b": false, "a:b": false, "a b": false, "é": false,
	} {
		if got := epoch.ValidKeyID(id); got != want {
			t.Errorf("ValidKeyID(%q) = %v, want %v", id, got, want)
		}
	}
}
