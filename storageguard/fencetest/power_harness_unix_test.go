//go:build unix

package fencetest_test

import (
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/dirfence"
	"github.com/termfence/termfence/storageguard/fencetest"
)

// harnessDurable is dirfence, except that once a prober has opened the
// fence (after the first cut), a racer dies as it opens it: a fence whose
// state a cut left past reading, as bbolt without its syncs panics on a
// page of the wrong type.
var harnessDurable = fencetest.Durable{Open: func(path string) (storageguard.Fence, error) {
	probed := path + ".probed"
	switch os.Getenv("TERMFENCE_FENCETEST_CHILD") {
	case "prober":
		if err := os.WriteFile(probed, nil, 0o644); err != nil {
			return nil, err
		}
	case "racer":
		if _, err := os.Stat(probed); err == nil {
			panic("harness: the fence's state is past reading")
		}
	}
	return dirfence.Open(path)
}}

// killDisk is a PowerDisk whose cut kills the processes and loses nothing.
type killDisk struct {
	dir  string
	mu   sync.Mutex
	pids []int
}

func (d *killDisk) Dir() string { return d.dir }

func (d *killDisk) Track(pid int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pids = append(d.pids, pid)
}

func (d *killDisk) PowerCut(bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, pid := range d.pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	d.pids = nil
	return nil
}

func (d *killDisk) FailNextSync() {}

// TestPowerLossRaiserDiesAfterCut: a raiser that dies on what the previous
// cut left is a violation PowerLoss reports at once — not a round that
// waits two minutes for acknowledgements and fails as the harness's own
// error (CI saw that with bbolt's syncs removed: the control failed
// instead of catching the broken fence).
func TestPowerLossRaiserDiesAfterCut(t *testing.T) {
	disk := &killDisk{dir: t.TempDir()}
	r := fencetest.PowerLossControl(t, harnessDurable, disk, fencetest.PowerOptions{Rounds: 3, Seed: 1})
	if !strings.HasPrefix(r.Violation, "round 1: the fence does not work on what the previous cut left: raiser 0 ended before the cut") ||
		!strings.Contains(r.Violation, "past reading") {
		t.Fatalf("violation %q, want round 1's raiser dying on the state, with its panic", r.Violation)
	}
}
