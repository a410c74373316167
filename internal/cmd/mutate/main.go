// Command mutate measures how many planted bugs the project's own tests
// catch: for each mutant of mutants.go (a realistic one-to-three-line bug
// in a safety-critical file) it replaces the exact original snippet in a
// temporary copy of the module, runs the affected packages' tests with a
// per-mutant time bound, and records the mutant as killed (a test failed),
// survived (every test passed) or timeout (the bound passed: a bug caught
// only by hanging, which counts as a weak kill). It prints one line
// per mutant and the score.
//
//	go run ./internal/cmd/mutate                 # the core set (-set core)
//	go run ./internal/cmd/mutate -only EP3,E1b   # some
//	go run ./internal/cmd/mutate -check          # only check that every snippet is found once
//	go run ./internal/cmd/mutate -set features   # roles, admission, proxy hold, ... (-set all: every set)
//	go run ./internal/cmd/mutate -whole -set all -table kills.md
//	                                             # whole-package mode (whole.go): each package's
//	                                             # plain go test, a bound per package, kill times
//
// CI runs it only with TERMFENCE_MUTATE=1 (.ci/run): a full run took 21
// minutes on a loaded two-core machine. PostgreSQL mutants need TERMFENCE_POSTGRES_DSN, as
// the tests do; without it their tests skip and the mutants survive.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

func main() {
	var (
		only    = flag.String("only", "", "comma-separated mutant IDs to run (default: all)")
		check   = flag.Bool("check", false, "only check that every mutant's snippet occurs exactly once")
		bound   = flag.Duration("timeout", 6*time.Minute, "time bound of one mutant's tests")
		root    = flag.String("root", ".", "the module's root")
		verbose = flag.Bool("v", false, "print the failing output of killed mutants")
		set     = flag.String("set", "core", "which mutants: one of the sets named in mutantSets, or all")
		whole   = flag.Bool("whole", false, "whole-package mode: run each affected package's whole go test (no -run), one package at a time, each within -pkg-timeout")
		pkgTime = flag.Duration("pkg-timeout", 8*time.Minute, "whole-package mode: the bound of one package's go test (a hang is reported as a timeout naming the running tests)")
		table   = flag.String("table", "", "whole-package mode: also write the results as a Markdown table to this file")
	)
	flag.Parse()
	all, err := mutantSet(*set)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(2)
	}
	ms := selected(all, *only)
	if err := validate(*root, ms); err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(2)
	}
	if *check {
		fmt.Printf("mutate: %d mutants, every snippet found exactly once\n", len(ms))
		return
	}
	tmp, err := os.MkdirTemp("", "termfence-mutate-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(2)
	}
	defer os.RemoveAll(tmp)
	if err := copyTree(*root, tmp); err != nil {
		fmt.Fprintln(os.Stderr, "mutate: copy the tree:", err)
		os.Exit(2)
	}
	var killed, survived, timedOut, unbuilt []string
	var rows []wholeResult
	start := time.Now()
	for _, m := range ms {
		var (
			res string
			out []byte
			d   time.Duration
		)
		if *whole {
			r := runWhole(tmp, m, *pkgTime)
			rows = append(rows, r)
			if *table != "" { // after each mutant: a long run cut short keeps what finished
				if err := os.WriteFile(*table, []byte(markdownTable(rows)), 0o644); err != nil {
					fmt.Fprintln(os.Stderr, "mutate:", err)
				}
			}
			res, out, d = r.Result, r.out, r.Took
			fmt.Printf("%-10s %-9s %6.1fs  %-28s %s\n", m.ID, res, d.Seconds(), r.By(), m.What)
		} else {
			res, out, d = run(tmp, m, *bound)
			fmt.Printf("%-10s %-9s %6.1fs  %s\n", m.ID, res, d.Seconds(), m.What)
		}
		switch res {
		case "killed":
			killed = append(killed, m.ID)
			if *verbose {
				fmt.Println(indent(failures(out, 15)))
			}
		case "survived":
			survived = append(survived, m.ID)
		case "unbuilt":
			unbuilt = append(unbuilt, m.ID)
			fmt.Println(indent(lastLines(out, 5)))
		default:
			timedOut = append(timedOut, m.ID)
		}
	}
	fmt.Printf("mutate: %d mutants in %v: %d killed, %d survived %v, %d timed out %v, %d did not compile %v\n",
		len(ms), time.Since(start).Round(time.Second), len(killed), len(survived), survived, len(timedOut), timedOut, len(unbuilt), unbuilt)

	if len(survived)+len(timedOut)+len(unbuilt) > 0 {
		os.Exit(1)
	}
}

// mutantSets are the named sets of mutants (-set NAME), one per area of
// the code they are planted in; -set all is their union, in this order.
var mutantSets = []struct {
	name    string
	mutants []mutant
}{
	{"core", mutants},
	{"features", roundMutants},
	{"liveness", livenessMutants},
	{"redis", redisMutants},
	{"fences", fencesMutants},
	{"pg", pgMutants},
	{"durable", durableMutants},
	{"wire", wireMutants},
	{"membership", membershipMutants},
	{"roles", rolesMutants},
}

// mutantSet returns the mutants of a -set name.
func mutantSet(name string) ([]mutant, error) {
	var all []mutant
	var known []string
	for _, s := range mutantSets {
		if s.name == name {
			return s.mutants, nil
		}
		all = append(all, s.mutants...)
		known = append(known, s.name)
	}
	if name == "all" {
		return all, nil
	}
	return nil, fmt.Errorf("-set %q: want one of %s, or all", name, strings.Join(known, ", "))
}

func selected(all []mutant, only string) []mutant {
	if only == "" {
		return all
	}
	want := map[string]bool{}
	for _, id := range strings.Split(only, ",") {
		want[strings.TrimSpace(id)] = true
	}
	var out []mutant
	for _, m := range all {
		if want[m.ID] {
			out = append(out, m)
		}
	}
	return out
}

// validate checks that IDs are unique and each snippet occurs exactly
// once in its file.
func validate(root string, ms []mutant) error {
	var errs []error
	seen := map[string]bool{}
	for _, m := range ms {
		if seen[m.ID] {
			errs = append(errs, fmt.Errorf("%s: duplicate ID", m.ID))
		}
		seen[m.ID] = true
		if len(m.Packages) == 0 {
			errs = append(errs, fmt.Errorf("%s: no packages to test", m.ID))
		}
		b, err := os.ReadFile(filepath.Join(root, m.File))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.ID, err))
			continue
		}
		if n := bytes.Count(b, []byte(m.Original)); n != 1 {
			errs = append(errs, fmt.Errorf("%s: the original snippet occurs %d times in %s, want once", m.ID, n, m.File))
		}
		if m.Original == m.Replacement {
			errs = append(errs, fmt.Errorf("%s: the replacement is the original", m.ID))
		}
	}
	return errors.Join(errs...)
}

// run applies m in the copy at dir, runs its tests and restores the file.
func run(dir string, m mutant, bound time.Duration) (result string, out []byte, took time.Duration) {
	path := filepath.Join(dir, m.File)
	orig, err := os.ReadFile(path)
	if err != nil {
		return "error: " + err.Error(), nil, 0
	}
	defer os.WriteFile(path, orig, 0o644)
	mutated := bytes.Replace(orig, []byte(m.Original), []byte(m.Replacement), 1)
	if err := os.WriteFile(path, mutated, 0o644); err != nil {
		return "error: " + err.Error(), nil, 0
	}
	args := []string{"test", "-count=1", "-failfast", "-timeout", (bound + time.Minute).String()}
	if m.Run != "" {
		args = append(args, "-run", m.Run)
	}
	args = append(args, m.Packages...)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return "error: " + err.Error(), nil, 0
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the go command and its test binaries
		<-done
		return "timeout", buf.Bytes(), time.Since(start)
	}
	took = time.Since(start)
	if err == nil {
		return "survived", buf.Bytes(), took
	}
	if bytes.Contains(buf.Bytes(), []byte("[build failed]")) || bytes.Contains(buf.Bytes(), []byte("[setup failed]")) {
		// Caught by the compiler, not by a test: the mutant needs fixing.
		return "unbuilt", buf.Bytes(), took
	}
	return "killed", buf.Bytes(), took
}

// copyTree copies the module at src to dst, without .git.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() && (rel == ".git" || strings.HasPrefix(rel, ".ci/bin")) {
			return filepath.SkipDir
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, info.Mode().Perm())
	})
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// failures returns up to n lines of out that say what failed: the
// "--- FAIL" lines and the tests' own messages (file.go:line), or
// out's last n lines if it has none (a panic, a build error).
func failures(out []byte, n int) string {
	var keep []string
	for _, l := range strings.Split(string(out), "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "--- FAIL") || strings.HasPrefix(t, "panic:") || testMessage.MatchString(t) {
			keep = append(keep, l)
		}
	}
	if len(keep) == 0 {
		return lastLines(out, n)
	}
	if len(keep) > n {
		keep = keep[:n]
	}
	return strings.Join(keep, "\n")
}

// testMessage matches the start of a test's log line: "name_test.go:123: "
// (or a helper's, "suite.go:45: ").
var testMessage = regexp.MustCompile(`^[A-Za-z0-9_]+\.go:[0-9]+: `)

func indent(s string) string { return "    " + strings.ReplaceAll(s, "\n", "\n    ") }
