//go:build unix

package storageguard_test

import (
	"bufio"
	"context"
	"database/sql"
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
	"github.com/termfence/termfence/storageguard/fencetest"
)

// Environment of the child roles.
const (
	envKind = "TF_CHILD_KIND" // dir or sqlite
	envPath = "TF_CHILD_PATH" // the fence's file or directory
	envLog  = "TF_CHILD_LOG"  // writer: directory of the guarded log files
	envOps  = "TF_CHILD_OPS"  // writer: operations to run
	envSeed = "TF_CHILD_SEED" // writer: random seed
	envFrom = "TF_CHILD_FROM" // raiser: first term to raise to
)

// longEnv makes the multi-process and crash tests run longer.
const longEnv = "TERMFENCE_LONG"

func init() {
	childRoles["writer"] = childWriter
	childRoles["raiser"] = childRaiser
}

// openKind opens a fence of the given kind over path, as a child would.
func openKind(kind, path string) (storageguard.Fence, error) {
	switch kind {
	case "sqlite":
		db, err := sql.Open("sqlite", sqliteDSN(path))
		if err != nil {
			return nil, err
		}
		s, err := storageguard.OpenSQL(context.Background(), db, storageguard.SQLite)
		if err != nil {
			db.Close()
			return nil, err
		}
		return sqlFenceDB{s, db}, nil
	}
	return nil, fmt.Errorf("unknown kind %q", kind)
}

// sqlFenceDB closes its database with the fence.
type sqlFenceDB struct {
	*storageguard.SQL
	db *sql.DB
}

func (f sqlFenceDB) Close() error { f.SQL.Close(); return f.db.Close() }

// openRetry opens the fence.
func openRetry(kind, path string, _ time.Time) (storageguard.Fence, error) {
	return openKind(kind, path)
}

var mpResources = []string{"acct/1", "acct/2"}

// childWriter presents random epochs near each resource's newest and, for
// each accepted write, appends "S term pid" and then "E term pid" to the
// resource's log file inside the write: the log is the guarded resource, and
// its line order is the global order of starts and ends.
func childWriter() int {
	kind, path, logDir := os.Getenv(envKind), os.Getenv(envPath), os.Getenv(envLog)
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
			if f, err = openRetry(kind, path, deadline); err != nil {
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
			return appendLog(filepath.Join(logDir, logName(r)), func() {
				// The injected fault: a writer stalls mid-write.
				if rng.IntN(3) == 0 {
					time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
				}
			}, fmt.Sprintf("S %d %d\n", term, pid), fmt.Sprintf("E %d %d\n", term, pid))
		})
		if err != nil && !errors.Is(err, storageguard.ErrStale) {
			fmt.Fprintln(os.Stderr, "do:", err)
			return 1
		}
	}
	if f != nil {
		f.Close()
	}
	return 0
}

func logName(resource string) string { return strings.ReplaceAll(resource, "/", "_") + ".log" }

func appendLog(path string, middle func(), start, end string) error {
	lf, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer lf.Close()
	if _, err := lf.WriteString(start); err != nil {
		return err
	}
	middle()
	_, err = lf.WriteString(end)
	return err
}

// childRaiser raises one resource through terms from, from+1, … and prints
// each term to stdout once Admit has returned: an acknowledged raise.
func childRaiser() int {
	kind, path := os.Getenv(envKind), os.Getenv(envPath)
	from, _ := strconv.ParseUint(os.Getenv(envFrom), 10, 64)
	f, err := openRetry(kind, path, time.Now().Add(30*time.Second))
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

func childCmd(tb testing.TB, role string, env ...string) *exec.Cmd {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{childEnv + "=" + role}, env...)...)
	return cmd
}

func fencePath(t *testing.T, kind string) string {
	switch kind {
	}
	return filepath.Join(t.TempDir(), "fence.sqlite")
}

var mpKinds = []string{"sqlite"}

// TestMultiProcess runs several child processes that guard the same
// resources through one fence on disk, and checks I4 on the guarded logs.
func TestMultiProcess(t *testing.T) {
	procs, ops := 3, 60
	if os.Getenv(longEnv) != "" {
		procs, ops = 6, 600
	}
	for _, kind := range mpKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			path, logDir := fencePath(t, kind), t.TempDir()
			cmds := make([]*exec.Cmd, procs)
			for i := range cmds {
				cmds[i] = childCmd(t, "writer", envKind+"="+kind, envPath+"="+path, envLog+"="+logDir,
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
			f, err := openKind(kind, path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			total := 0
			for _, r := range mpResources {
				spans, err := fencetest.ReadSpans(filepath.Join(logDir, logName(r)))
				if err != nil {
					t.Fatal(err)
				}
				total += len(spans)
				if err := fencetest.CheckSpans(spans); err != nil {
					t.Errorf("%s: %v", r, err)
				}
				var top uint64
				for _, s := range spans {
					top = max(top, s.Term)
				}
				if h, err := f.Highest(context.Background(), r); err != nil || h.Term != top {
					t.Errorf("%s: Highest = %v, %v; highest accepted write was under term %d", r, h, err, top)
				}
			}
			t.Logf("%d processes, %d accepted writes", procs, total)
			if total == 0 {
				t.Fatal("no write was accepted")
			}
		})
	}
}

// TestCrashDurability kills a child with SIGKILL at random moments while it
// raises, and checks after each kill that the reopened fence still holds
// every raise the child acknowledged (I5).
func TestCrashDurability(t *testing.T) {
	rounds := 50
	if os.Getenv(longEnv) != "" {
		rounds = 500
	}
	for _, kind := range mpKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			path := fencePath(t, kind)
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
			var lastAck uint64
			for round := 0; round < rounds; round++ {
				cmd := childCmd(t, "raiser", envKind+"="+kind, envPath+"="+path, envFrom+"="+strconv.FormatUint(lastAck+1, 10))
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
				f, err := openRetry(kind, path, time.Now().Add(10*time.Second))
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
		})
	}
}
