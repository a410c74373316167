package httpfence_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/internal/skiptest"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/fencetest"
)

// TestMain checks for leaked goroutines after the package's tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(skiptest.Wrap(m)) }

// gtKey is the HMAC key the proxy and middleware tests sign with.
var gtKey = []byte("termfence test key, 32 bytes or more")

// gtSpy returns a Spy over a Memory fence.
func gtSpy() *fencetest.Spy { return &fencetest.Spy{Fence: storageguard.NewMemory()} }

func gtCodec(t testing.TB, key []byte) epoch.Codec {
	t.Helper()
	c, err := epoch.NewHMAC(key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func gtSign(t testing.TB, s epoch.Signer, ep epoch.Epoch) string {
	t.Helper()
	tok, err := s.Sign(ep)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func gtEp(term uint64, leader string) epoch.Epoch {
	return epoch.Epoch{Cluster: "payments", Term: term, Leader: leader}
}
