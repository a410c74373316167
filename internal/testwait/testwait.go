// Package testwait scales the bounds tests put on waits for an event to
// the machine they run on, so that a test that waits for something that
// does happen never fails merely because the machine is loaded (once,
// TestLeaderMeta's 10 s wait failed a new user's first go test on a busy
// two-core machine).
//
// A bound is not a sleep: the tests poll or select on the event and use the
// bound only to turn "never happens" into a failure with a message. So a
// generous bound costs nothing when the test passes.
//
// Guarantees: Bound(d) >= d; it grows with the run queue per CPU at the
// moment the package is first used (Linux /proc/loadavg; elsewhere 1) and
// with TERMFENCE_TEST_SCALE (a number, default 1). Non-guarantees: load that
// starts later is not seen, so the base bounds themselves must already be
// generous (several times what a quiet machine needs).
package testwait

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ScaleEnv names the environment variable that multiplies every bound.
const ScaleEnv = "TERMFENCE_TEST_SCALE"

// maxLoadFactor caps the load's part of the factor.
const maxLoadFactor = 8

var factor = sync.OnceValue(func() float64 {
	f := 1.0
	if v, err := strconv.ParseFloat(os.Getenv(ScaleEnv), 64); err == nil && v > 1 {
		f = v
	}
	return f * loadFactor()
})

// loadFactor is the one-minute load average per CPU, between 1 and
// maxLoadFactor.
func loadFactor() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 1
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return 1
	}
	l, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return 1
	}
	return min(max(l/float64(runtime.NumCPU()), 1), maxLoadFactor)
}

// Factor is the factor Bound multiplies by: at least 1.
func Factor() float64 { return factor() }

// Bound returns d scaled for this machine (see the package doc).
func Bound(d time.Duration) time.Duration {
	return time.Duration(float64(d) * factor())
}
