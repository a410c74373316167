// Package netlabtest builds netlab labs for tests: it skips the test, saying
// why, where labs cannot be built (not root, no iproute2, not Linux), and
// closes the lab when the test ends, also when it fails or panics.
package netlabtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/termfence/termfence/internal/netlab"
)

// New builds a lab of the named hosts (netlab.Names("h", 3) for h1..h3),
// or skips the test when this machine cannot. The lab is closed at the
// test's cleanup; a failure to close fails the test.
func New(tb testing.TB, hosts ...string) *netlab.Lab {
	tb.Helper()
	Require(tb)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := netlab.New(ctx, netlab.Config{Hosts: hosts})
	if errors.Is(err, netlab.ErrUnsupported) {
		tb.Skipf("skipping: %v", err)
	}
	if err != nil {
		tb.Fatalf("netlab: %v", err)
	}
	tb.Cleanup(func() {
		if err := l.Close(); err != nil {
			tb.Errorf("netlab: close %s: %v", l.Name(), err)
		}
	})
	return l
}

// Require skips the test, saying why, when this machine cannot build labs.
func Require(tb testing.TB) {
	tb.Helper()
	if err := netlab.Check(); err != nil {
		tb.Skipf("skipping: this test builds Linux network namespaces (internal/netlab): %v", err)
	}
}
