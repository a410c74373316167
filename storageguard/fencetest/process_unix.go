//go:build unix

package fencetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// childEnv names the role a re-executed test binary plays; see RunChild.
const childEnv = "TERMFENCE_FENCETEST_CHILD"

// Environment of the child roles.
const (
	envPath = "TERMFENCE_FENCETEST_PATH" // the fence's state
	envLog  = "TERMFENCE_FENCETEST_LOG"  // writer: directory of the span logs
	envOps  = "TERMFENCE_FENCETEST_OPS"  // writer: operations to run
	envSeed = "TERMFENCE_FENCETEST_SEED" // writer: random seed
	envFrom = "TERMFENCE_FENCETEST_FROM" // raiser: first term to raise to
)

// LongEnv, when set in the environment, makes MultiProcess and
// CrashDurability run about ten times longer.
const LongEnv = "TERMFENCE_LONG"

// RunChild runs the part of a child process that MultiProcess or
// CrashDurability started, and exits; in any other process it returns at
// once. Call it first in TestMain, with the Durable the tests use:
//
//	func TestMain(m *testing.M) {
//		fencetest.RunChild(durable)
//		os.Exit(m.Run())
//	}
func RunChild(d Durable) {
	var code int
	switch role := os.Getenv(childEnv); role {
	case "":
		return
	case "writer":
		code = childWriter(d)
	case "raiser":
		code = childRaiser(d)
	case "syncer":
		code = childSyncer(d)
	case "racer":
		code = childRacer(d)
	case "prober":
		code = childProber(d)
	default:
		fmt.Fprintf(os.Stderr, "fencetest child: unknown role %q\n", role)
		code = 2
	}
	os.Exit(code)
}

// openRetry opens the fence, trying again while d.Busy says another process
// holds it.
func openRetry(d Durable, path string, deadline time.Time) (storageguard.Fence, error) {
	for {
		f, err := d.Open(path)
		if err == nil || d.Busy == nil || !d.Busy(err) || time.Now().After(deadline) {
			return f, err
		}
	}
}

var mpResources = []string{"acct/1", "acct/2"}

func logName(resource string) string { return strings.ReplaceAll(resource, "/", "_") + ".log" }

// childWriter presents random epochs near each resource's newest and, for
// each accepted write, appends a span to the resource's log inside the
// write: the log is the guarded resource, and its line order is the global
// order of starts and ends.
func childWriter(d Durable) int {
	path, logDir := os.Getenv(envPath), os.Getenv(envLog)
	ops, _ := strconv.Atoi(os.Getenv(envOps))
	seed, _ := strconv.ParseUint(os.Getenv(envSeed), 10, 64)
	rng := rand.New(rand.NewPCG(seed, uint64(os.Getpid())))
	pid := os.Getpid()
	ctx := context.Background()
	deadline := time.Now().Add(60 * time.Second)
	var f storageguard.Fence
	for i := 0; i < ops; i++ {
		if f == nil {
			var err error
			if f, err = openRetry(d, path, deadline); err != nil {
				fmt.Fprintln(os.Stderr, "open:", err)
				return 1
			}
		}
		r := mpResources[rng.IntN(len(mpResources))]
		h, err := f.Highest(ctx, r)
		if err != nil {
			fmt.Fprintln(os.Stderr, "highest:", err)
			return 1
		}
		term := int64(h.Term) + int64(rng.IntN(4)) - 2 // mostly current, sometimes older or newer
		if rng.IntN(4) == 0 {
			term = int64(h.Term) + 1
		}
		term = max(term, 1)
		e := epoch.Epoch{Cluster: "payments", Term: uint64(term), Leader: fmt.Sprintf("n%d", term%3)}
		err = f.Do(ctx, r, e, func(context.Context) error {
			return AppendSpan(filepath.Join(logDir, logName(r)), uint64(term), pid, func() {
				// The injected fault: a writer stalls mid-write.
				if rng.IntN(3) == 0 {
					time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
				}
			})
		})
		if err != nil && !errors.Is(err, storageguard.ErrStale) {
			fmt.Fprintln(os.Stderr, "do:", err)
			return 1
		}
		if d.Busy != nil && rng.IntN(4) == 0 {
			// Let the other processes have the state.
			f.Close()
			f = nil
		}
	}
	if f != nil {
		f.Close()
	}
	return 0
}

// childRaiser raises one resource through terms from, from+1, … and prints
// each term to stdout once Admit has returned: an acknowledged raise.
func childRaiser(d Durable) int {
	path := os.Getenv(envPath)
	from, _ := strconv.ParseUint(os.Getenv(envFrom), 10, 64)
	f, err := openRetry(d, path, time.Now().Add(30*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	out := bufio.NewWriter(os.Stdout)
	for t := from; ; t++ {
		if err := f.Admit(context.Background(), "crash", epoch.Epoch{Cluster: "payments", Term: t, Leader: "n1"}); err != nil {
			fmt.Fprintln(os.Stderr, "admit:", err)
			return 1
		}
		fmt.Fprintf(out, "%d\n", t)
		out.Flush()
	}
}

func childCmd(role string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{childEnv + "=" + role}, env...)...)
	return cmd
}

// MultiProcess runs several child processes (3, or 6 with LongEnv) that
// guard two resources through one fence state, each presenting random
// epochs near the newest and appending a span to the resource's log inside
// each accepted write, some writes stalling midway. It then checks
// docs/DESIGN.md I4 on the logs (CheckSpans) and that Highest names the
// newest accepted term. The children are this test binary; see RunChild.
func MultiProcess(t *testing.T, d Durable) {
	t.Helper()
	procs, ops := 3, 60
	if os.Getenv(LongEnv) != "" {
		procs, ops = 6, 600
	}
	path, logDir := filepath.Join(t.TempDir(), "fence"), t.TempDir()
	cmds := make([]*exec.Cmd, procs)
	for i := range cmds {
		cmds[i] = childCmd("writer", envPath+"="+path, envLog+"="+logDir,
			envOps+"="+strconv.Itoa(ops), envSeed+"="+strconv.Itoa(i))
		cmds[i].Stderr = os.Stderr
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("child: %v", err)
		}
	}
	f, err := d.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	total := 0
	for _, r := range mpResources {
		spans, err := ReadSpans(filepath.Join(logDir, logName(r)))
		if err != nil {
			t.Fatal(err)
		}
		total += len(spans)
		if err := CheckSpans(spans); err != nil {
			t.Errorf("%s: %v", r, err)
		}
		top := maxTerm(spans)
		if h, err := f.Highest(context.Background(), r); err != nil || h.Term != top {
			t.Errorf("%s: Highest = %v, %v; highest accepted write was under term %d", r, h, err, top)
		}
	}
	t.Logf("%d processes, %d accepted writes", procs, total)
	if total == 0 {
		t.Fatal("no write was accepted")
	}
}

// CrashDurability kills a child process with SIGKILL at random moments
// while it raises one resource (50 rounds, or 500 with LongEnv), and checks
// after each kill that the reopened fence still holds every raise the child
// acknowledged (docs/DESIGN.md I5). A killed process keeps the page cache,
// so this finds a raise acknowledged before it was written, not one
// acknowledged before it was synced. The children are this test binary;
// see RunChild.
func CrashDurability(t *testing.T, d Durable) {
	t.Helper()
	rounds := 50
	if os.Getenv(LongEnv) != "" {
		rounds = 500
	}
	path := filepath.Join(t.TempDir(), "fence")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var lastAck uint64
	for round := 0; round < rounds; round++ {
		cmd := childCmd("raiser", envPath+"="+path, envFrom+"="+strconv.FormatUint(lastAck+1, 10))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		want := 1 + rng.IntN(4) // acks to wait for before the kill
		for n := 0; n < want && sc.Scan(); n++ {
			v, err := strconv.ParseUint(sc.Text(), 10, 64)
			if err != nil {
				t.Fatalf("child said %q", sc.Text())
			}
			lastAck = v
		}
		// Kill at a random moment: often in the middle of the next raise.
		time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
		cmd.Process.Signal(syscall.SIGKILL)
		// Acks printed before the kill count too.
		for sc.Scan() {
			if v, err := strconv.ParseUint(sc.Text(), 10, 64); err == nil {
				lastAck = v
			}
		}
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("round %d: child was not killed: %v, stderr: %s", round, err, stderr.String())
		}
		f, err := openRetry(d, path, time.Now().Add(10*time.Second))
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
		}
		h, err := f.Highest(context.Background(), "crash")
		f.Close()
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if h.Term < lastAck {
			t.Fatalf("round %d: acknowledged raise to term %d lost: Highest after SIGKILL = %v", round, lastAck, h)
		}
		lastAck = max(lastAck, h.Term)
	}
	t.Logf("%d SIGKILL rounds, final term %d", rounds, lastAck)
}
