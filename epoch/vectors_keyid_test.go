package epoch_test

import (
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
