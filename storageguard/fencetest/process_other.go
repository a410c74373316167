//go:build !unix

package fencetest

import "testing"

// LongEnv, when set in the environment, makes MultiProcess and
// CrashDurability run about ten times longer.
const LongEnv = "TERMFENCE_LONG"

// RunChild returns at once: MultiProcess and CrashDurability start no child
// processes on this platform.
func RunChild(Durable) {}

// MultiProcess is skipped on this platform: the harness signals and waits
// for processes the unix way.
func MultiProcess(t *testing.T, _ Durable) {
	t.Skip("fencetest: MultiProcess runs on unix only")
}

// CrashDurability is skipped on this platform: it kills processes with
// SIGKILL.
func CrashDurability(t *testing.T, _ Durable) {
	t.Skip("fencetest: CrashDurability runs on unix only")
}

// StableBeforeUse is skipped on this platform: it traces a child process
// with strace.
func StableBeforeUse(t *testing.T, _ Durable, _ func(path string) bool) {
	t.Skip("fencetest: StableBeforeUse runs on unix only")
}
