package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Whole-package mode (-whole): a planted bug must fail the package's plain
// `go test`, as users and CI run it, not only a chosen subset of its tests.
// Each of the mutant's packages runs its whole test binary (no -run, with
// -failfast), one package after another, until one fails. Each package gets
// its own bound, pkgBound, passed to go test as -timeout: a package that
// hangs instead of failing then panics with the list of running tests,
// which the result names (a timeout, a weak kill), instead of being killed
// from outside without a word.

// wholeResult is one mutant's outcome in whole-package mode.
type wholeResult struct {
	ID, What string
	Result   string        // killed, survived, timeout, unbuilt, error: ...
	Took     time.Duration // until the verdict (a kill: until the failing package ended)
	Package  string        // the package that failed or hung
	Tests    []string      // killed: the failing tests; timeout: the tests running at the bound
	out      []byte
}

// By says which package and tests decided the result, for the one-line
// report.
func (r wholeResult) By() string {
	if r.Package == "" {
		return ""
	}
	s := strings.TrimPrefix(r.Package, "./")
	if len(r.Tests) > 0 {
		s += " " + r.Tests[0]
	}
	return s
}

// runWhole applies m in the copy at dir and runs each of its packages' whole
// go test within pkgBound, stopping at the first that does not pass.
func runWhole(dir string, m mutant, pkgBound time.Duration) wholeResult {
	r := wholeResult{ID: m.ID, What: m.What}
	path := filepath.Join(dir, m.File)
	orig, err := os.ReadFile(path)
	if err != nil {
		r.Result = "error: " + err.Error()
		return r
	}
	defer os.WriteFile(path, orig, 0o644)
	if err := os.WriteFile(path, bytes.Replace(orig, []byte(m.Original), []byte(m.Replacement), 1), 0o644); err != nil {
		r.Result = "error: " + err.Error()
		return r
	}
	start := time.Now()
	r.Result = "survived"
	for _, pkg := range m.Packages {
		res, out := goTestWhole(dir, pkg, pkgBound)
		r.out = append(r.out, out...)
		if res == "passed" {
			continue
		}
		r.Result, r.Package = res, pkg
		switch res {
		case "timeout":
			r.Tests = runningTests(out)
		case "killed":
			r.Tests = failedTests(out)
		}
		break
	}
	r.Took = time.Since(start)
	return r
}

// goTestWhole runs one package's whole go test with go test's own -timeout
// at bound (so that a hang prints the running tests), verbose (so that the
// tests started and not ended can be named even if the go command has to
// be killed); the go command is killed if it has not ended by twice the
// bound (building the test binary is not within go test's -timeout, and on
// a loaded machine takes minutes). It returns passed, killed, timeout,
// unbuilt or "error: ...", and the output.
func goTestWhole(dir, pkg string, bound time.Duration) (string, []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*bound)
	defer cancel()
	cmd := exec.Command("go", "test", "-v", "-count=1", "-failfast", "-timeout", bound.String(), pkg)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		return "error: " + err.Error(), nil
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the go command and its test binary
		<-done
		return "timeout", buf.Bytes()
	}
	return classifyWhole(err == nil, buf.Bytes()), buf.Bytes()
}

// classifyWhole reads a finished go test's verdict from its exit and output.
func classifyWhole(passed bool, out []byte) string {
	switch {
	case passed:
		return "passed"
	case bytes.Contains(out, []byte("panic: test timed out after")):
		return "timeout"
	case bytes.Contains(out, []byte("[build failed]")) || bytes.Contains(out, []byte("[setup failed]")):
		return "unbuilt"
	}
	return "killed"
}

var (
	failLine    = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)
	runningLine = regexp.MustCompile(`^\s+(Test\S*|Example\S*|Fuzz\S*) \(`)
	startLine   = regexp.MustCompile(`(?m)^=== RUN\s+(\S+)`)
	endLine     = regexp.MustCompile(`(?m)^\s*--- (?:PASS|FAIL|SKIP): (\S+)`)
)

// failedTests returns the tests a go test output reports failed, deepest
// (a subtest) first as go test prints them.
func failedTests(out []byte) []string {
	var names []string
	for _, m := range failLine.FindAllSubmatch(out, -1) {
		names = append(names, string(m[1]))
	}
	return names
}

// runningTests returns the tests go test's timeout panic lists as running
// ("panic: test timed out after 8m0s\n\trunning tests:\n\t\tTestX (8m0s)"),
// or without that list (the go command was killed) the tests its verbose
// output shows started ("=== RUN") and not ended ("--- PASS/FAIL/SKIP").
func runningTests(out []byte) []string {
	var names []string
	in := false
	for _, l := range strings.Split(string(out), "\n") {
		switch {
		case strings.TrimSpace(l) == "running tests:":
			in = true
		case in:
			m := runningLine.FindStringSubmatch(l)
			if m == nil {
				return names
			}
			names = append(names, m[1]+" (running)")
		}
	}
	if len(names) > 0 {
		return names
	}
	ended := map[string]bool{}
	for _, m := range endLine.FindAllSubmatch(out, -1) {
		ended[string(m[1])] = true
	}
	for _, m := range startLine.FindAllSubmatch(out, -1) {
		if n := string(m[1]); !ended[n] && !slices.Contains(names, n+" (running)") {
			names = append(names, n+" (running)")
		}
	}
	return names
}

// markdownTable is the results as a table for docs/TESTING.md: one row per
// mutant, in the order run.
func markdownTable(rows []wholeResult) string {
	var b strings.Builder
	b.WriteString("| mutant | result | time | package | test that failed (or was running at the bound) |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		tests := strings.Join(r.Tests, ", ")
		if len(r.Tests) > 2 {
			tests = strings.Join(r.Tests[:2], ", ") + ", …"
		}
		fmt.Fprintf(&b, "| %s | %s | %.1f s | %s | %s |\n", r.ID, r.Result, r.Took.Seconds(), strings.TrimPrefix(r.Package, "./"), tests)
	}
	return b.String()
}
