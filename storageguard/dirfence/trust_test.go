//go:build linux

package dirfence_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/dirfence"
	"github.com/termfence/termfence/storageguard/fencetest/powerfs"
)

// The power-loss tests of the promise that a record another process wrote
// is synced before it is trusted (docs/DESIGN.md I5; mutants D4, D5).
//
// What proves it: process A writes a record and dies before making it
// durable (powerfs keeps the write in its cache, as a page cache would).
// Process B opens the directory, reads A's record and acts on it: it
// admits A's epoch without raising and refuses the one below. Then the
// power goes. If B synced what it read before acting, A's record is on
// disk and B's refusal still holds; if not, the cut takes the record back
// and the epoch B refused is admitted again. A SIGKILL alone cannot show
// this (the kernel keeps A's write), nor can a cut without B (A never
// acknowledged its record).

const envDie, envMutant = "TERMFENCE_DIRFENCE_DIE", "TERMFENCE_DIRFENCE_MUTANT"

func init() {
	childRoles["dying"] = childDying
	childRoles["witness"] = childWitness
	childRoles["highest"] = childHighest
}

// childDying raises r to envTerm, dying at the sync envDie names: for
// "data" it first raises r to envTerm-1 durably (the fdatasync belongs
// to a raise that is not a resource's first).
func childDying() int {
	term, _ := strconv.ParseUint(os.Getenv(envTerm), 10, 64)
	ctx := context.Background()
	if os.Getenv(envDie) == "data" {
		f, err := dirfence.Open(os.Getenv(envPath))
		if err != nil || f.Admit(ctx, "r", ep(term-1, "n1")) != nil {
			fmt.Fprintln(os.Stderr, "first raise:", err)
			return 1
		}
		f.Close()
	}
	f, err := dirfence.OpenDying(os.Getenv(envPath), os.Getenv(envDie))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	err = f.Admit(ctx, "r", ep(term, "n1"))
	fmt.Fprintln(os.Stderr, "the raise returned instead of dying:", err)
	return 1
}

// childWitness admits envTerm (already the highest: no raise) and is
// refused envTerm-1, printing "ok" when both went so; with envMutant set
// its fence skips that sync.
func childWitness() int {
	var f *dirfence.Fence
	var err error
	if m := os.Getenv(envMutant); m != "" {
		f, err = dirfence.OpenMutant(os.Getenv(envPath), m)
	} else {
		f, err = dirfence.Open(os.Getenv(envPath))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer f.Close()
	term, _ := strconv.ParseUint(os.Getenv(envTerm), 10, 64)
	ctx := context.Background()
	if err := f.Admit(ctx, "r", ep(term, "n1")); err != nil {
		fmt.Fprintln(os.Stderr, "admit:", err)
		return 1
	}
	if err := f.Admit(ctx, "r", ep(term-1, "n1")); !errors.Is(err, storageguard.ErrStale) {
		fmt.Fprintln(os.Stderr, "the term below was not refused:", err)
		return 1
	}
	fmt.Println("ok")
	return 0
}

func childHighest() int {
	f, err := dirfence.Open(os.Getenv(envPath))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer f.Close()
	h, err := f.Highest(context.Background(), "r")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(h.Term)
	return 0
}

// trustAfterCut runs A (dying at die, raising to term), then B (with
// mutant), cuts the power and returns the highest term after the cut.
func trustAfterCut(t *testing.T, die string, term uint64, mutant string) uint64 {
	t.Helper()
	disk := powerfs.MountTest(t, powerfs.Options{})
	path := filepath.Join(disk.Dir(), "fence")
	run := func(role string, env ...string) string {
		t.Helper()
		cmd := childCmd(t, role, append([]string{envPath + "=" + path, envTerm + "=" + strconv.FormatUint(term, 10)}, env...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v: %s", role, err, stderr.String())
		}
		return strings.TrimSpace(string(out))
	}
	run("dying", envDie+"="+die)
	if got := run("witness", envMutant+"="+mutant); got != "ok" {
		t.Fatalf("witness said %q", got)
	}
	if err := disk.PowerCut(false); err != nil {
		t.Fatal(err)
	}
	h, err := strconv.ParseUint(run("highest"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestDirSyncsRecordBeforeTrust (D4): A raises to 2 and dies before its
// fdatasync; B admits 2 and refuses 1; after the cut 1 must still be
// refused.
func TestDirSyncsRecordBeforeTrust(t *testing.T) {
	t.Parallel()
	if h := trustAfterCut(t, "data", 2, ""); h < 2 {
		t.Fatalf("after the cut the highest is %d: the term 1 that a process refused, on a record it read, is admitted again", h)
	}
}

// TestDirSyncsRecordBeforeTrustControl: the same with B's fdatasync of
// the record removed (mutant noloadsync): the cut takes term 2 back.
func TestDirSyncsRecordBeforeTrustControl(t *testing.T) {
	t.Parallel()
	if h := trustAfterCut(t, "data", 2, "noloadsync"); h >= 2 {
		t.Fatalf("control: without the sync of what it read, the highest after the cut is still %d: the test cannot see D4", h)
	}
}

// TestDirSyncsDirBeforeTrust (D5): A's first raise, to 5, renames its file
// into place and dies before the directory fsync; B admits 5 and refuses
// 4; after the cut 4 must still be refused.
func TestDirSyncsDirBeforeTrust(t *testing.T) {
	t.Parallel()
	if h := trustAfterCut(t, "dir", 5, ""); h < 5 {
		t.Fatalf("after the cut the highest is %d: the term 4 that a process refused, on a file whose name was never synced, is admitted again", h)
	}
}

// TestDirSyncsDirBeforeTrustControl: the same with B's directory fsync
// removed (mutant noloaddirsync): the cut takes the file back.
func TestDirSyncsDirBeforeTrustControl(t *testing.T) {
	t.Parallel()
	if h := trustAfterCut(t, "dir", 5, "noloaddirsync"); h >= 5 {
		t.Fatalf("control: without the directory sync, the highest after the cut is still %d: the test cannot see D5", h)
	}
}
