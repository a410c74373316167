package epoch_test

import (
	"crypto/hmac"
	"fmt"
	"strings"
	"testing"

	"github.com/termfence/termfence/epoch"
)

// newHS256Verifier is the vectors' hs256 verifier: key (without an ID)
// and the keys with IDs of keys.hs256_key_ids.
//
// Package epoch on this branch verifies tokens without a key ID only; key
// IDs (tf1:hs256.<key ID>:..., NewHMACVerifier) arrive with HMAC key
// rotation. Until then the tokens that name a key ID are checked here by
// docs/TOKEN.md's procedure (section 6), and every other token by the
// package.
func newHS256Verifier(t testing.TB, key []byte, ids map[string][]byte) epoch.Verifier {
	t.Helper()
	return hs256Keys{noID: mustHMAC(t, key), ids: ids}
}

type hs256Keys struct {
	noID epoch.Verifier
	ids  map[string][]byte
}

func (v hs256Keys) Verify(tok string) (epoch.Epoch, error) {
	if len(tok) > epoch.MaxTokenLen || !strings.HasPrefix(tok, "tf1:hs256.") {
		return v.noID.Verify(tok)
	}
	alg, rest, _ := strings.Cut(strings.TrimPrefix(tok, "tf1:"), ":")
	text, sig, ok := strings.Cut(rest, ":")
	if !ok || sig == "" || strings.Contains(sig, ":") {
		return v.noID.Verify(tok) // malformed: the package says so
	}
	id := strings.TrimPrefix(alg, "hs256.")
	key, ok := v.ids[id]
	if !ok || !validKeyID(id) {
		return epoch.Epoch{}, fmt.Errorf("%w: no key with ID %q", epoch.ErrBadSignature, id)
	}
	want := hs256As(key, alg, text)
	if !hmac.Equal([]byte(want[strings.LastIndexByte(want, ':')+1:]), []byte(sig)) {
		return epoch.Epoch{}, epoch.ErrBadSignature
	}
	return epoch.Parse(text)
}

func validKeyID(id string) bool {
	if id == "" || len(id) > 32 {
		return false
	}
	for _, c := range []byte(id) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
