package sqlfence_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/termfence/termfence/internal/skiptest"
	"github.com/termfence/termfence/storageguard/fencetest"
)

// TestMain lets the test binary double as the child processes of the
// multi-process tests, and checks for leaked goroutines.
func TestMain(m *testing.M) {
	fencetest.RunChild(durable)
	goleak.VerifyTestMain(skiptest.Wrap(m))
}
