package boltfence_test

import (
	"errors"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/boltfence"
	"github.com/termfence/termfence/storageguard/fencetest"
)

// durable is the fence as the multi-process tests open it: bbolt admits
// one process per file, so a child that finds it locked tries again.
var durable = fencetest.Durable{
	Open: func(path string) (storageguard.Fence, error) {
		// The power-loss control asks for a fence whose commits are not
		// synced.
		if os.Getenv(fencetest.VariantEnv) == "nosync" {
			return boltfence.OpenNoSync(path)
		}
		return boltfence.Open(path)
	},
	Busy: func(err error) bool { return errors.Is(err, boltfence.ErrLocked) },
}

// TestMain lets the test binary double as the child processes of the
// multi-process tests, and checks for leaked goroutines.
func TestMain(m *testing.M) {
	fencetest.RunChild(durable)
	goleak.VerifyTestMain(m)
}
