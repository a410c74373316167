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
	"sync"
	"testing"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/internal/testwait"
	"github.com/termfence/termfence/storageguard"
)

// PowerDisk is a disk whose power a test can cut, for PowerLoss:
// powerfs.Disk (package storageguard/fencetest/powerfs) is one. fencetest
// itself does not import it, so that a fence's tests pull in FUSE only
// when they use it.
type PowerDisk interface {
	// Dir is where the disk is mounted.
	Dir() string
	// Track names a process that the next cut must end.
	Track(pid int)
	// PowerCut cuts the power: every process on the disk ends, and
	// everything not synced is lost (torn: partly kept, at random); the
	// disk is then mounted again at Dir.
	PowerCut(torn bool) error
	// FailNextSync makes the next fsync or fdatasync on the disk fail
	// with EIO, after which what it covered may or may not be on disk.
	FailNextSync()
}

// VariantEnv is set, in the child processes of PowerLoss, to
// PowerOptions.Variant: a Durable whose Open must open the fence in a
// particular way (SQLite's journal mode, say) reads it there.
const VariantEnv = "TERMFENCE_FENCETEST_VARIANT"

// PowerOptions tunes PowerLoss.
type PowerOptions struct {
	// Rounds of raising and cutting; zero means 12. LongEnv makes it ten
	// times as many.
	Rounds int
	// Procs is how many processes raise at once; zero means 1. Use 1 for
	// a fence whose state one process opens at a time (Durable.Busy).
	Procs int
	// Variant is passed to the children in VariantEnv.
	Variant string
	// Path is where the fence's state lives, relative to the disk's mount
	// point; "" means "fence". The directories on its way that are
	// missing are created before the first round with os.MkdirAll, which
	// syncs nothing, as an application that just made a directory for
	// the fence leaves them: the fence must make its own path durable.
	Path string
	// SearchPaths searches the directory states a fence can start in:
	// before the first round, and before about one round in three after
	// it, the fence moves to a new path one to four directories deep
	// below the disk (Path is ignored). A random number of those
	// directories, from none to all, was made before by "another
	// process"; the raisers make the rest as they start; both with
	// os.MkdirAll, which syncs nothing. The first cut after a move is
	// whole. PowerReport.Paths counts the paths.
	SearchPaths bool
	// Seed seeds PowerLoss's own choices (how many acks to wait for, when
	// to cut, which cuts tear, which rounds fail a sync); zero means
	// PowerSeedEnv if set, else the clock. The seed is in PowerReport. The
	// children's timing is not replayed, so a replay repeats the choices,
	// not necessarily the interleaving.
	Seed uint64
}

// PowerSeedEnv, set to a number, is PowerOptions.Seed when that is zero.
const PowerSeedEnv = "TERMFENCE_POWERLOSS_SEED"

// PowerReport is what a PowerLoss run did and found.
type PowerReport struct {
	Rounds, Acks, Refusals, Errors, FailedSyncs, TornCuts int
	// Paths is how many paths the fence lived at (SearchPaths), and
	// Made how many of them had every directory made before the start.
	Paths, Made int
	// Seed is the seed of PowerLoss's choices (PowerOptions.Seed).
	Seed uint64
	// Violation is the first broken promise, or "".
	Violation string
}

// Environment of the power-loss roles.
const (
	envProcID = "TERMFENCE_FENCETEST_PROC" // racer: its number
	envPower  = "TERMFENCE_FENCETEST_POWER_RESOURCE"
	envMkdir  = "TERMFENCE_FENCETEST_MKDIR" // racer: make the fence's directory first
)

const powerResource = "power"

// childRacer raises the resource again and again, printing "A t" once a
// raise to t is acknowledged (Admit returned nil), and sometimes presents
// the term below the highest, printing "R t" when it is refused; "E t"
// after any other error (a failed sync: the raise was not acknowledged),
// and then it opens the fence again.
func childRacer(d Durable) int {
	path := os.Getenv(envPath)
	if os.Getenv(envMkdir) != "" {
		// The application makes the fence's directory as it starts
		// (os.MkdirAll, which syncs nothing): PowerOptions.SearchPaths.
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "mkdir:", err)
			return 1
		}
	}
	seed, _ := strconv.ParseUint(os.Getenv(envSeed), 10, 64)
	rng := rand.New(rand.NewPCG(seed, uint64(os.Getpid())))
	out := bufio.NewWriter(os.Stdout)
	ctx := context.Background()
	var f storageguard.Fence
	parent := os.Getppid()
	for {
		if os.Getppid() != parent {
			// The test process is gone (go test's timeout panics without
			// running cleanups): stop, rather than raise for good.
			return 1
		}
		if f == nil {
			var err error
			if f, err = openRetry(d, path, time.Now().Add(60*time.Second)); err != nil {
				// After the cut, until the SIGKILL arrives, everything fails:
				// keep trying (the parent gives up on a round without acks).
				fmt.Fprintf(out, "E 0 open: %v\n", oneLine(err))
				out.Flush()
				f = nil
				time.Sleep(10 * time.Millisecond)
				continue
			}
		}
		h, err := f.Highest(ctx, powerResource)
		if err != nil {
			fmt.Fprintf(out, "E 0 highest: %v\n", oneLine(err))
			out.Flush()
			f.Close()
			f = nil
			continue
		}
		term := h.Term + 1
		if h.Term > 1 && rng.IntN(4) == 0 {
			term = h.Term - 1
		}
		err = f.Admit(ctx, powerResource, epoch.Epoch{Cluster: "payments", Term: term, Leader: "n1"})
		switch {
		case err == nil:
			fmt.Fprintf(out, "A %d\n", term)
		case errors.Is(err, storageguard.ErrStale):
			fmt.Fprintf(out, "R %d\n", term)
		default:
			fmt.Fprintf(out, "E %d %v\n", term, oneLine(err))
			f.Close()
			f = nil
		}
		out.Flush()
		if f != nil && d.Busy != nil && rng.IntN(4) == 0 {
			f.Close()
			f = nil
		}
	}
}

// exited reports whether the child pid has exited (it is a zombie, not
// yet waited for). Without /proc it reports false.
func exited(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X')
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }

// childProber opens the fence and prints the resource's highest term.
func childProber(d Durable) int {
	f, err := openRetry(d, os.Getenv(envPath), time.Now().Add(60*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	defer f.Close()
	h, err := f.Highest(context.Background(), powerResource)
	if err != nil {
		fmt.Fprintln(os.Stderr, "highest:", err)
		return 1
	}
	fmt.Println(h.Term)
	return 0
}

// PowerLoss cuts the power under processes that raise a fence: each
// round starts opts.Procs child processes that raise one resource again
// and again (and present a stale term now and then), cuts the power at a
// random moment after a few acknowledged raises — half the cuts tear
// unsynced writes, a quarter of the rounds first make one sync fail with
// EIO — and then opens the fence in a new process. It fails t unless,
// after every cut, the fence opens and keeps working (a torn record is
// detected and the previous one used; a raiser of the next round that
// dies on what the cut left is a violation) and its highest term is at
// least every raise that
// was acknowledged and above every term that was refused (docs/DESIGN.md
// I5): so a failed sync must never have been reported as a raise, and a
// record must never have been trusted before it was durable. The
// children are this test binary; see RunChild.
func PowerLoss(t *testing.T, d Durable, disk PowerDisk, opts PowerOptions) PowerReport {
	t.Helper()
	raiseReturnsFirst(t, d)
	r := powerLoss(t, disk, opts)
	if r.Violation != "" {
		t.Fatalf("power loss: %s (%+v)", r.Violation, r)
	}
	if r.Acks == 0 {
		t.Fatalf("power loss: no raise was acknowledged in %d rounds", r.Rounds)
	}
	t.Logf("power loss: %d cuts (%d torn), %d raises acknowledged, %d refusals, %d failed syncs, %d errors reported, %d paths (%d made whole before the start)", r.Rounds, r.TornCuts, r.Acks, r.Refusals, r.FailedSyncs, r.Errors, r.Paths, r.Made)
	return r
}

// PowerLossControl runs PowerLoss on a fence known to be broken (a sync
// removed) and fails t unless the run finds the broken promise: it shows
// that PowerLoss can fail.
func PowerLossControl(t *testing.T, d Durable, disk PowerDisk, opts PowerOptions) PowerReport {
	t.Helper()
	raiseReturnsFirst(t, d)
	r := powerLoss(t, disk, opts)
	if r.Violation == "" {
		t.Fatalf("control: PowerLoss found nothing wrong with a fence whose sync was removed (%+v)", r)
	}
	t.Logf("control: PowerLoss caught it: %s", r.Violation)
	return r
}

// stallBase is how long, on a quiet machine, PowerLoss waits for the next
// acknowledged raise before it says that raises do not go through (scaled
// for the machine's load, internal/testwait): a raise takes milliseconds,
// and a round's raisers start and open the fence in a few seconds.
const stallBase = 20 * time.Second

// raiseReturnsFirst runs the conformance suite's first check, RaiseReturns,
// on a fence d opens here, on the plain disk, before any child starts: a
// fence whose raise waits for itself (its high-water update outside its
// own transaction) fails within raiseBound, saying so, instead of after
// the rounds' waits for acknowledgements.
func raiseReturnsFirst(t *testing.T, d Durable) {
	t.Helper()
	f, err := d.Open(filepath.Join(t.TempDir(), "raise-returns"))
	if err != nil {
		t.Fatalf("power loss: open a fence to check that a raise returns: %v", err)
	}
	defer f.Close()
	testRaiseReturns(t, f)
}

func powerLoss(t *testing.T, disk PowerDisk, opts PowerOptions) PowerReport {
	t.Helper()
	rounds, procs := opts.Rounds, max(opts.Procs, 1)
	if rounds == 0 {
		rounds = 12
	}
	if os.Getenv(LongEnv) != "" {
		rounds *= 10
	}
	rel := opts.Path
	if rel == "" {
		rel = "fence"
	}
	path := filepath.Join(disk.Dir(), rel)
	_, err := os.Stat(filepath.Dir(path))
	madeDirs := errors.Is(err, os.ErrNotExist)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatalf("power loss: create the fence's directory: %v", err)
	}
	seed := opts.Seed
	if v := os.Getenv(PowerSeedEnv); v != "" && seed == 0 {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("power loss: %s=%q: %v", PowerSeedEnv, v, err)
		}
	}
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	rng := rand.New(rand.NewPCG(seed, 2))
	rep := PowerReport{Seed: seed}
	var floorAck, floorRefused uint64 // highest acknowledged; highest refused
	moved := false
	for round := 0; round < rounds; round++ {
		rep.Rounds++
		if opts.SearchPaths && (round == 0 || rng.IntN(3) == 0) {
			depth := 1 + rng.IntN(4)
			made := rng.IntN(depth + 1)
			parts := []string{disk.Dir(), fmt.Sprintf("p%d", round)}
			for d := 1; d < depth; d++ {
				parts = append(parts, fmt.Sprintf("d%d", d))
			}
			if made > 0 {
				if err := os.MkdirAll(filepath.Join(parts[:1+made]...), 0o755); err != nil {
					t.Fatalf("power loss: make the fence's directories: %v", err)
				}
			}
			if made == depth {
				rep.Made++
			}
			path = filepath.Join(append(parts, "fence")...)
			floorAck, floorRefused = 0, 0 // a new fence
			rep.Paths++
			moved = true
		}
		type line struct {
			kind byte
			term uint64
			text string
		}
		var mu sync.Mutex
		var lines []line
		acks := make(chan struct{}, 1<<16)
		ended := make(chan int, procs) // a raiser's output ended: it exited
		cmds := make([]*exec.Cmd, procs)
		stderrs := make([]*strings.Builder, procs)
		var readers sync.WaitGroup
		for i := range cmds {
			cmd := childCmd("racer", envPath+"="+path, envSeed+"="+strconv.Itoa(rng.IntN(1<<30)),
				envProcID+"="+strconv.Itoa(i), VariantEnv+"="+opts.Variant, envMkdir+"=1")
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			stderrs[i] = &strings.Builder{}
			cmd.Stderr = stderrs[i]
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			disk.Track(cmd.Process.Pid)
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			cmds[i] = cmd
			readers.Add(1)
			go func() {
				defer readers.Done()
				defer func() { ended <- i }()
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					s := sc.Text()
					f := strings.SplitN(s, " ", 3)
					if len(f) < 2 {
						continue
					}
					v, err := strconv.ParseUint(f[1], 10, 64)
					if err != nil {
						continue
					}
					mu.Lock()
					lines = append(lines, line{s[0], v, s})
					mu.Unlock()
					if s[0] == 'A' {
						acks <- struct{}{}
					}
				}
			}()
		}
		failSync := rng.IntN(4) == 0
		if failSync {
			disk.FailNextSync()
			rep.FailedSyncs++
		}
		// diedEarly stops the round when raiser i exited before the cut. On
		// the state an earlier cut left that is what the cut did (a file
		// torn past reading: bbolt panics on a page of the wrong type), so
		// it is a violation; on a fresh file it is the harness's failure.
		diedEarly := func(i int) PowerReport {
			for _, cmd := range cmds {
				cmd.Process.Kill()
			}
			readers.Wait()
			for _, cmd := range cmds {
				cmd.Wait()
			}
			why := fmt.Sprintf("raiser %d ended before the cut: %v, stderr: %s", i, cmds[i].ProcessState, stderrs[i].String())
			if round == 0 || floorAck == 0 && moved {
				t.Fatalf("round %d (a fence just made): %s", round, why)
			}
			rep.Violation = fmt.Sprintf("round %d: the fence does not work on what the previous cut left: %s", round, why)
			return rep
		}
		want := 1 + rng.IntN(6)
		// Two bounds on the wait for acknowledgements. Progress: raisers
		// raise again and again (three times in four to a new term), each
		// raise taking milliseconds, so a stretch of stallWait without an
		// acknowledged raise means raises do not go through — the fence's
		// update outside its own transaction waits for that transaction's
		// lock, say, until SQLite's busy timeout fails it, while a
		// resource's first raise (an insert) and the refusals of stale
		// terms still return. And in all, ackWait. Either says so at once
		// rather than run every round into the test's timeout.
		const ackWait = 2 * time.Minute
		// The load now, not only when the package started: a round's
		// children start and open the fence on the machine as it is.
		stallWait := time.Duration(float64(stallBase) * max(testwait.Factor(), testwait.FactorNow()))
		deadline := time.After(ackWait)
		stall := time.NewTimer(stallWait)
		for n := 0; n < want; {
			var why string
			select {
			case <-acks:
				n++
				stall.Reset(stallWait)
				continue
			case i := <-ended:
				return diedEarly(i)
			case <-stall.C:
				why = fmt.Sprintf("none for %v", stallWait)
			case <-deadline:
				why = fmt.Sprintf("in %v", ackWait)
			}
			mu.Lock()
			var last []string
			for _, l := range lines[max(len(lines)-5, 0):] {
				last = append(last, l.text)
			}
			mu.Unlock()
			var errs []string
			for _, cmd := range cmds {
				cmd.Process.Kill()
			}
			readers.Wait()
			for i, cmd := range cmds {
				cmd.Wait()
				if e := strings.TrimSpace(stderrs[i].String()); e != "" {
					errs = append(errs, fmt.Sprintf("raiser %d: %s", i, e))
				}
			}
			t.Fatalf("round %d: %d raisers acknowledged %d raises, want %d: %s: the fence's raise does not return (last lines %q, stderr %q)", round, procs, n, want, why, last, errs)
		}
		stall.Stop()
		time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
		// The first cut after the harness created the fence's directories
		// is whole: a torn one could keep their unsynced names by chance.
		torn := rng.IntN(2) == 0 && !(round == 0 && madeDirs) && !moved
		moved = false
		if torn {
			rep.TornCuts++
		}
		for i, cmd := range cmds {
			if exited(cmd.Process.Pid) {
				return diedEarly(i)
			}
		}
		if err := disk.PowerCut(torn); err != nil {
			t.Fatalf("round %d: cut: %v", round, err)
		}
		readers.Wait()
		for _, cmd := range cmds {
			// Killed by the cut, or dead of it before the SIGKILL came (a
			// bbolt map faults once the disk is gone).
			cmd.Wait()
		}
		mu.Lock()
		roundAcks := 0
		for _, l := range lines {
			switch l.kind {
			case 'A':
				rep.Acks++
				roundAcks++
				floorAck = max(floorAck, l.term)
			case 'R':
				rep.Refusals++
				floorRefused = max(floorRefused, l.term)
			case 'E':
				rep.Errors++
			}
		}
		mu.Unlock()
		// Read the highest after the cut in a new process.
		cmd := childCmd("prober", envPath+"="+path, VariantEnv+"="+opts.Variant)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			rep.Violation = fmt.Sprintf("round %d: the fence does not open after a cut (torn %v): %v: %s", round, torn, err, stderr.String())
			return rep
		}
		h, err := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64)
		if err != nil {
			t.Fatalf("round %d: prober said %q", round, out)
		}
		switch {
		case h < floorAck:
			rep.Violation = fmt.Sprintf("round %d: acknowledged raise to term %d lost: highest after the cut (torn %v, failed sync %v) is %d", round, floorAck, torn, failSync, h)
			return rep
		case floorRefused > 0 && h <= floorRefused:
			rep.Violation = fmt.Sprintf("round %d: term %d was refused before the cut (torn %v, failed sync %v), and the highest after it is %d: it would be admitted", round, floorRefused, torn, failSync, h)
			return rep
		}
		// What survived unacknowledged stands from now on.
		floorAck = max(floorAck, h)
	}
	return rep
}
