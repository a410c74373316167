// Package skiptest makes tests skipped for want of something (a PostgreSQL
// server, Chromium, root) visible in a plain `go test ./...`, which prints
// only "ok" for a passing package and hides its skips. A test calls Skip
// instead of t.Skipf; the package's TestMain wraps its *testing.M with
// Wrap, which prints after the tests one line per missing thing:
//
//	skiptest: storageguard/pgfence: 14 tests skipped for want of PostgreSQL (set TERMFENCE_POSTGRES_DSN)
//
// Where it prints: go test captures a test binary's output and shows it
// only for a failing package or under -v, so on Linux the line goes to the
// standard error of the process that started the test binary (go test's
// own, through /proc/PPID/fd/2); elsewhere, and under -v, to the binary's
// standard error. Test-only: production code never imports it.
package skiptest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
)

var (
	mu      sync.Mutex
	skipped = map[string]int{} // what was missing -> tests skipped
)

// Skip records that tb is skipped for want of what (say "PostgreSQL (set
// TERMFENCE_POSTGRES_DSN)") and skips it with the formatted message.
func Skip(tb testing.TB, want, format string, args ...any) {
	tb.Helper()
	mu.Lock()
	skipped[want]++
	mu.Unlock()
	tb.Skipf(format, args...)
}

// TestingM is what goleak.VerifyTestMain runs.
type TestingM interface{ Run() int }

// Wrap returns m with a Run that runs the tests and then prints the
// package's skips (see the package documentation).
func Wrap(m TestingM) TestingM { return wrapped{m} }

type wrapped struct{ m TestingM }

func (w wrapped) Run() int {
	code := w.m.Run()
	Report()
	return code
}

// Report prints the skips recorded so far, one line per missing thing.
func Report() {
	mu.Lock()
	var lines []string
	for want, n := range skipped {
		tests := "tests"
		if n == 1 {
			tests = "test"
		}
		lines = append(lines, fmt.Sprintf("skiptest: %s: %d %s skipped for want of %s", pkgName(), n, tests, want))
	}
	mu.Unlock()
	if len(lines) == 0 {
		return
	}
	sort.Strings(lines)
	out := os.Stderr
	if !testing.Verbose() && runtime.GOOS == "linux" {
		if f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/2", os.Getppid()), os.O_WRONLY|os.O_APPEND, 0); err == nil {
			defer f.Close()
			out = f
		}
	}
	fmt.Fprintln(out, strings.Join(lines, "\n"))
}

// pkgName is the test binary's package: "pgfence" from pgfence.test.
func pkgName() string {
	return strings.TrimSuffix(filepath.Base(os.Args[0]), ".test")
}
