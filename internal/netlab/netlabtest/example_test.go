package netlabtest_test

import (
	"testing"

	"github.com/termfence/termfence/internal/netlab"
	"github.com/termfence/termfence/internal/netlab/netlabtest"
)

// A test that needs real hosts: it is skipped where labs cannot be built.
func ExampleNew() {
	var t *testing.T // the test's *testing.T
	lab := netlabtest.New(t, netlab.Names("h", 3)...)
	_ = lab.Isolate(lab.Host("h1"))
}
