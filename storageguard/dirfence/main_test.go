//go:build unix && !aix

package dirfence_test

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/dirfence"
	"github.com/termfence/termfence/storageguard/fencetest"
)

// durable is the fence as the multi-process tests of fencetest open it.
var durable = fencetest.Durable{
	Open: func(path string) (storageguard.Fence, error) {
		// The power-loss controls ask for a fence with a sync removed.
		if v := os.Getenv(fencetest.VariantEnv); v != "" {
			return dirfence.OpenMutant(path, v)
		}
		return dirfence.Open(path)
	},
}

// childEnv names the role of this package's own child processes (see
// sticky_test.go); fencetest's children have a variable of their own.
const childEnv = "TERMFENCE_DIRFENCE_CHILD"

// Environment of this package's child roles.
const (
	envPath     = "TERMFENCE_DIRFENCE_PATH"     // the fence directory
	envLog      = "TERMFENCE_DIRFENCE_LOG"      // dirraise: the span log to write
	envResource = "TERMFENCE_DIRFENCE_RESOURCE" // the resource to raise
	envTerm     = "TERMFENCE_DIRFENCE_TERM"     // dirraise: the term to raise to
)

// childRoles maps a role name to its body, which returns the exit code.
var childRoles = map[string]func() int{
	"dirraise":      childDirRaise,
	"dirraiseserve": childDirRaiseServe,
}

// TestMain lets the test binary double as the child processes of the
// multi-process tests (fencetest's and this package's), and checks for
// leaked goroutines.
func TestMain(m *testing.M) {
	fencetest.RunChild(durable)
	if role := os.Getenv(childEnv); role != "" {
		fn, ok := childRoles[role]
		if !ok {
			fmt.Fprintf(os.Stderr, "dirfence test child: unknown role %q\n", role)
			os.Exit(2)
		}
		os.Exit(fn())
	}
	goleak.VerifyTestMain(m)
}

// childCmd returns the command that runs this test binary as a child in
// role, with env added to its environment.
func childCmd(tb testing.TB, role string, env ...string) *exec.Cmd {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{childEnv + "=" + role}, env...)...)
	return cmd
}

func ep(term uint64, leader string) epoch.Epoch {
	return epoch.Epoch{Cluster: "payments", Term: term, Leader: leader}
}

// waitLimit bounds every wait for something that must happen.
const waitLimit = 10 * time.Second

// waitFor polls cond until it holds or waitLimit passes.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// recv receives from ch, failing t after waitLimit.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}
