//go:build linux

package dirfence_test

import (
	"testing"

	"github.com/termfence/termfence/storageguard/fencetest"
	"github.com/termfence/termfence/storageguard/fencetest/powerfs"
)

// TestDirPowerLoss: two processes raise one resource while the power is
// cut under them; no acknowledged raise is lost and no refused term comes
// back (fencetest.PowerLoss on powerfs).
func TestDirPowerLoss(t *testing.T) {
	t.Parallel()
	disk := powerfs.MountTest(t, powerfs.Options{})
	fencetest.PowerLoss(t, durable, disk, fencetest.PowerOptions{Procs: 2})
}

// TestDirPowerLossControl: the same with the raise's fdatasync removed
// (the test-only variant "nosync" of durable): PowerLoss must catch it.
func TestDirPowerLossControl(t *testing.T) {
	t.Parallel()
	disk := powerfs.MountTest(t, powerfs.Options{})
	fencetest.PowerLossControl(t, durable, disk, fencetest.PowerOptions{Procs: 2, Variant: "nosync"})
}

// TestDirPowerLossSearch: power cuts over the directory states a fence
// directory can start in (fencetest.PowerOptions.SearchPaths), with two
// raisers.
func TestDirPowerLossSearch(t *testing.T) {
	t.Parallel()
	disk := powerfs.MountTest(t, powerfs.Options{})
	fencetest.PowerLoss(t, durable, disk, fencetest.PowerOptions{Rounds: 4, Procs: 2, SearchPaths: true})
}
