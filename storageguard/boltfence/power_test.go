//go:build linux

package boltfence_test

import (
	"testing"

	"github.com/termfence/termfence/storageguard/fencetest"
	"github.com/termfence/termfence/storageguard/fencetest/powerfs"
)

// TestPowerLoss: a process raising through a bbolt file loses no
// acknowledged raise to a power cut (fencetest.PowerLoss on powerfs).
func TestPowerLoss(t *testing.T) {
	t.Parallel()
	disk := powerfs.MountTest(t, powerfs.Options{})
	fencetest.PowerLoss(t, durable, disk, fencetest.PowerOptions{})
}

// TestPowerLossControl: the same with bbolt's NoSync set (the test-only
// variant "nosync"): PowerLoss must catch it.
func TestPowerLossControl(t *testing.T) {
	t.Parallel()
	disk := powerfs.MountTest(t, powerfs.Options{})
	fencetest.PowerLossControl(t, durable, disk, fencetest.PowerOptions{Variant: "nosync"})
}

// TestPowerLossNewDirectory: the fence file in directories the
// application has just created (os.MkdirAll, which syncs nothing) loses
// no acknowledged raise to a power cut. Open used to sync the file's
// directory only: its own entry in its parent, and theirs, were lost, and
// the fence with every raise in it.
func TestPowerLossNewDirectory(t *testing.T) {
	t.Parallel()
	disk := powerfs.MountTest(t, powerfs.Options{})
	fencetest.PowerLoss(t, durable, disk, fencetest.PowerOptions{Rounds: 4, Path: "app/state/fence.db"})
}

// TestPowerLossSearch: power cuts over the directory states a fence file
// can start in (fencetest.PowerOptions.SearchPaths): paths one to four
// directories deep, made before the start in part, in whole or not at
// all, the rest made by the raiser as it starts.
func TestPowerLossSearch(t *testing.T) {
	t.Parallel()
	disk := powerfs.MountTest(t, powerfs.Options{})
	fencetest.PowerLoss(t, durable, disk, fencetest.PowerOptions{Rounds: 4, SearchPaths: true})
}
