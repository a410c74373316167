package boltfence_test

import (
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/boltfence"
	"github.com/termfence/termfence/storageguard/fencetest"
)

// durable is the fence as the multi-process tests open it: bbolt admits
// one process per file, so a child that finds it locked tries again.
var durable = fencetest.Durable{
	Open: func(path string) (storageguard.Fence, error) { return boltfence.Open(path) },
	Busy: func(err error) bool { return errors.Is(err, boltfence.ErrLocked) },
}

// TestMain lets the test binary double as the child processes of the
// multi-process tests, and checks for leaked goroutines.
func TestMain(m *testing.M) {
	fencetest.RunChild(durable)
	goleak.VerifyTestMain(m)
}
