package storageguard_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks for leaked goroutines after the package's tests, and lets
// the test binary double as the child process of the multi-process and crash
// tests (see child_test.go): when the child environment variable is set it
// runs the child's role and exits instead of running tests.
func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(runChild(role))
	}
	goleak.VerifyTestMain(m)
}
