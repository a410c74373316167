package epoch_test

import (
	"strconv"
	"testing"

	"github.com/termfence/termfence/epoch"
)

// newHS256Verifier is the vectors' hs256 verifier: key (without an ID)
// and the keys with IDs of keys.hs256_key_ids, as one
// epoch.NewHMACVerifier.
func newHS256Verifier(t testing.TB, key []byte, ids map[string][]byte) epoch.Verifier {
	t.Helper()
	keys := []epoch.HMACKey{{Secret: key}}
	for id, k := range ids {
		keys = append(keys, epoch.HMACKey{ID: id, Secret: k})
	}
	v, err := epoch.NewHMACVerifier(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// newHS256Codecs is the vectors' hs256 keyring as signing codecs, one per
// key: epoch.NewHMACKeys(that key, every other key). Each must answer every
// vector as the verifier does: holding a signing key changes nothing about
// which tokens are accepted (a token relabelled to an ID the keyring does
// not hold is refused even when the codec's own signing key signed it).
func newHS256Codecs(t testing.TB, key []byte, ids map[string][]byte) map[string]epoch.Codec {
	t.Helper()
	all := []epoch.HMACKey{{Secret: key}}
	for id, k := range ids {
		all = append(all, epoch.HMACKey{ID: id, Secret: k})
	}
	codecs := map[string]epoch.Codec{}
	for i, sign := range all {
		var rest []epoch.HMACKey
		rest = append(rest, all[:i]...)
		rest = append(rest, all[i+1:]...)
		c, err := epoch.NewHMACKeys(sign, rest...)
		if err != nil {
			t.Fatal(err)
		}
		codecs["signing with key "+strconv.Quote(sign.ID)] = c
	}
	return codecs
}
