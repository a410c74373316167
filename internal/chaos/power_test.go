package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/termfence/termfence/storageguard/fencetest/powerfs"
)

// TestChaosPowerLoss runs the nemesis with power cuts under the nodes'
// data directories and the store's data (powerfs), among the other
// faults, and checks the history with the same checker: no term reused or
// gone back shows as a stale write accepted, no write the store
// acknowledged may be lost. It skips, saying so, without root or
// /dev/fuse. TERMFENCE_CHAOS_POWER_FAULTS=n injects n faults instead of 12.
func TestChaosPowerLoss(t *testing.T) {
	if err := powerfs.Available(); err != nil {
		t.Skipf("power-loss chaos skipped: %v", err)
	}
	cfg := shortConfig(t)
	cfg.PowerLoss = true
	cfg.Faults = 12
	if v := os.Getenv("TERMFENCE_CHAOS_POWER_FAULTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("TERMFENCE_CHAOS_POWER_FAULTS=%q: %v", v, err)
		}
		cfg.Faults = n
		// A long history: give porcupine the long mode's time.
		cfg.CheckTimeout = 20 * time.Minute
	}
	cfg.Forge = "" // the hostile peer has its own run (TestChaos)
	cfg.FailureDir = t.TempDir()
	res := runChaos(t, cfg)
	fmt.Println(res.Line + " (power loss)")
	for _, k := range []string{"power-cut-node", "power-cut-store"} {
		if res.FaultCounts[k] == 0 {
			t.Errorf("no %s fault was injected", k)
		}
	}
	if !res.OK() {
		for _, s := range append(append(res.LeaderConflicts, res.ContractBreaks...), res.Details...) {
			t.Errorf("%s", s)
		}
		t.Errorf("violation under power cuts (seed %d): %s", res.Seed, filepath.Join(res.FailurePath, "seed.txt"))
	}
}
