//go:build unix && !aix

package dirfence_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/dirfence"
	"github.com/termfence/termfence/storageguard/fencetest"
)

// childDirRaise raises one resource of the fence at envPath to envTerm with
// a write that appends a span (writer: its pid) to the span log at envLog,
// and prints how long its Do waited before the write ran (ns).
func childDirRaise() int {
	path, logPath, r := os.Getenv(envPath), os.Getenv(envLog), os.Getenv(envResource)
	term, _ := strconv.ParseUint(os.Getenv(envTerm), 10, 64)
	d, err := dirfence.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	defer d.Close()
	start := time.Now()
	var waited time.Duration
	err = d.Do(context.Background(), r, ep(term, "n1"), func(context.Context) error {
		waited = time.Since(start)
		return fencetest.AppendSpan(logPath, term, os.Getpid(), nil)
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "do:", err)
		return 1
	}
	fmt.Println(waited.Nanoseconds())
	return 0
}

// childDirRaiseServe raises envResource of the fence at envPath to each term
// it reads from stdin, one per line, and answers each with the time Admit
// took (ns).
func childDirRaiseServe() int {
	d, err := dirfence.Open(os.Getenv(envPath))
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	defer d.Close()
	r := os.Getenv(envResource)
	sc := bufio.NewScanner(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	for sc.Scan() {
		term, err := strconv.ParseUint(sc.Text(), 10, 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bad term:", sc.Text())
			return 1
		}
		start := time.Now()
		if err := d.Admit(context.Background(), r, ep(term, "n1")); err != nil {
			fmt.Fprintln(os.Stderr, "admit:", err)
			return 1
		}
		fmt.Fprintln(out, time.Since(start).Nanoseconds())
		out.Flush()
	}
	return 0
}

// exclusiveFree reports whether an exclusive flock on path could be taken
// now (through a file description of its own, as another process would).
func exclusiveFree(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return false
		}
		t.Fatal(err)
	}
	return true
}

// runRaiser runs a raiser child to its end, and fails t if it fails or has
// not ended after 30 s; behind says what it would then be waiting behind.
func runRaiser(t *testing.T, cmd *exec.Cmd, behind func() string) {
	t.Helper()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("raiser: %v, stderr: %s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-exited
		t.Fatalf("a raise from another process waited 30s behind %s", behind())
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []dirfence.Options{{Linger: -1}, {Probe: -time.Millisecond}} {
		if err := o.Validate(); !errors.Is(err, storageguard.ErrBadConfig) {
			t.Errorf("%+v: Validate = %v, want ErrBadConfig", o, err)
		}
		if _, err := dirfence.OpenWith(t.TempDir(), o); !errors.Is(err, storageguard.ErrBadConfig) {
			t.Errorf("%+v: OpenWith = %v, want ErrBadConfig", o, err)
		}
	}
	if err := (dirfence.Options{}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestStickyLingerRelease: after a same-epoch write the process keeps the
// shared lock (no other process can raise meanwhile, so the next write needs
// no re-read), and lets it go once it has been idle for the linger.
func TestStickyLingerRelease(t *testing.T) {
	dir := t.TempDir()
	// A probe interval of an hour: only the linger can release the lock.
	d := openWith(t, dir, dirfence.Options{Linger: 20 * time.Millisecond, Probe: time.Hour})
	ctx := context.Background()
	if err := d.Admit(ctx, "r", ep(3, "a")); err != nil {
		t.Fatal(err)
	}
	path := fenceFile(t, dir)
	start := time.Now()
	if err := d.Do(ctx, "r", ep(3, "a"), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	held := !exclusiveFree(t, path)
	heldFor := time.Since(start)
	if !held && heldFor < 20*time.Millisecond {
		t.Fatalf("the shared lock was let go %v after the write, before the 20ms linger", heldFor)
	}
	waitFor(t, func() bool { return exclusiveFree(t, path) }, "the idle fence to let its shared lock go")
	// And it is taken again by the next write.
	if err := d.Do(ctx, "r", ep(3, "a"), func(context.Context) error {
		if exclusiveFree(t, path) {
			return errors.New("a write ran without the shared lock")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestStickyYieldsToOtherProcessBusy (issue test i): a raise from another
// process completes while this process runs unbroken loops of same-epoch
// Dos from several goroutines (with plain flock, or a sticky lock that never
// yields, it would wait for ever), no write under the old epoch overlaps the
// raiser's write, and this process's old epoch is refused afterwards.
func TestStickyYieldsToOtherProcessBusy(t *testing.T) {
	for _, o := range []dirfence.Options{
		{},                  // defaults: 1ms probe, 1ms linger
		{Linger: time.Hour}, // never idle: only the probe can yield
	} {
		t.Run(fmt.Sprintf("linger=%v", o.Linger), func(t *testing.T) {
			dir, logPath := t.TempDir(), filepath.Join(t.TempDir(), "r.log")
			d := openWith(t, dir, o)
			ctx := context.Background()
			const r = "acct/7"
			if err := d.Admit(ctx, r, ep(5, "a")); err != nil {
				t.Fatal(err)
			}
			var (
				wg       sync.WaitGroup
				stop     atomic.Bool
				writes   atomic.Int64
				mu       sync.Mutex
				loopErrs []error
			)
			const loops = 4
			for g := 0; g < loops; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					writer := 1_000_000 + g // distinct from any pid
					var err error
					for !stop.Load() {
						err = d.Do(ctx, r, ep(5, "a"), func(context.Context) error {
							writes.Add(1)
							return fencetest.AppendSpan(logPath, 5, writer, nil)
						})
						if err != nil {
							break
						}
					}
					mu.Lock()
					loopErrs = append(loopErrs, err)
					mu.Unlock()
				}()
			}
			defer func() { stop.Store(true); wg.Wait() }()
			waitFor(t, func() bool { return writes.Load() > 100 }, "the loops to write")
			cmd := childCmd(t, "dirraise", envPath+"="+dir, envLog+"="+logPath, envResource+"="+r, envTerm+"=6")
			var stdout strings.Builder
			cmd.Stdout = &stdout
			runRaiser(t, cmd, func() string {
				return fmt.Sprintf("this process's same-epoch writes (%d written)", writes.Load())
			})
			wg.Wait() // every loop ends: its epoch is refused
			for _, err := range loopErrs {
				if !errors.Is(err, storageguard.ErrStale) {
					t.Fatalf("a same-epoch loop ended with %v, want ErrStale", err)
				}
			}
			if err := d.Do(ctx, r, ep(5, "a"), func(context.Context) error { return nil }); !errors.Is(err, storageguard.ErrStale) {
				t.Fatalf("old epoch after another process raised: %v, want ErrStale", err)
			}
			if h, err := d.Highest(ctx, r); err != nil || h != ep(6, "n1") {
				t.Fatalf("Highest = %v, %v", h, err)
			}
			spans, err := fencetest.ReadSpans(logPath)
			if err != nil {
				t.Fatal(err)
			}
			if err := fencetest.CheckSpans(spans); err != nil {
				t.Fatal(err)
			}
			if spans[len(spans)-1].Term != 6 {
				t.Fatalf("the raiser's write is not the last: %+v", spans[len(spans)-1])
			}
			t.Logf("%d same-epoch writes; the other process's raise waited %sns for its write to run", writes.Load(), strings.TrimSpace(stdout.String()))
		})
	}
}

// TestStickyYieldsToOtherProcessIdle (issue test ii): this process holds
// the shared lock, idle, with a linger of an hour; a raise from another
// process still completes (the holder's timer probes the intent lock).
func TestStickyYieldsToOtherProcessIdle(t *testing.T) {
	dir, logPath := t.TempDir(), filepath.Join(t.TempDir(), "r.log")
	d := openWith(t, dir, dirfence.Options{Linger: time.Hour})
	ctx := context.Background()
	if err := d.Admit(ctx, "r", ep(5, "a")); err != nil {
		t.Fatal(err)
	}
	if err := d.Do(ctx, "r", ep(5, "a"), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if exclusiveFree(t, fenceFile(t, dir)) {
		t.Fatal("no shared lock held after a write with a linger of an hour")
	}
	cmd := childCmd(t, "dirraise", envPath+"="+dir, envLog+"="+logPath, envResource+"=r", envTerm+"=6")
	runRaiser(t, cmd, func() string { return "an idle holder of the shared lock" })
	if err := d.Do(ctx, "r", ep(5, "a"), func(context.Context) error { return nil }); !errors.Is(err, storageguard.ErrStale) {
		t.Fatalf("old epoch after another process raised: %v, want ErrStale", err)
	}
}

// TestStickyHandlesBusy: the busy case between three fences in one
// process (flock treats them as three processes), many rounds: each raise by
// b completes while a1's and a2's goroutines write under the epoch before.
// With two holders whose shared locks overlap, only writer preference (the
// intent lock) gives the raiser a moment when nobody holds the lock: a
// holder that let go for a raiser and took the lock straight back would
// overlap the other and starve the raiser.
func TestStickyHandlesBusy(t *testing.T) {
	dir := t.TempDir()
	holders := []*dirfence.Fence{
		openWith(t, dir, dirfence.Options{Linger: time.Hour}),
		openWith(t, dir, dirfence.Options{Linger: time.Hour}),
	}
	b := open(t, dir)
	ctx := context.Background()
	var top atomic.Uint64
	top.Store(1)
	if err := b.Admit(ctx, "r", ep(1, "x")); err != nil {
		t.Fatal(err)
	}
	var (
		wg      sync.WaitGroup
		stop    atomic.Bool
		writes  atomic.Int64
		inWrite atomic.Int64 // holders' writes under an epoch below top running now
		errc    = make(chan error, 8)
	)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := holders[g%len(holders)]
			for !stop.Load() {
				term := top.Load()
				err := a.Do(ctx, "r", ep(term, "x"), func(context.Context) error {
					inWrite.Add(1)
					defer inWrite.Add(-1)
					writes.Add(1)
					if top.Load() > term {
						return fmt.Errorf("a write under term %d runs after term %d was admitted", term, top.Load())
					}
					return nil
				})
				if err != nil && !errors.Is(err, storageguard.ErrStale) {
					errc <- err
					return
				}
			}
		}()
	}
	defer func() { stop.Store(true); wg.Wait() }()
	for round := 0; round < 20; round++ {
		n := writes.Load()
		waitFor(t, func() bool { return writes.Load() > n+10 }, "the holders to write")
		next := top.Load() + 1
		done := make(chan error, 1)
		go func() {
			done <- b.Do(ctx, "r", ep(next, "x"), func(context.Context) error {
				top.Store(next) // inside b's write: no write under next-1 may run
				if k := inWrite.Load(); k != 0 {
					return fmt.Errorf("%d writes under the old epoch in flight during b's raise", k)
				}
				return nil
			})
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		case err := <-errc:
			t.Fatal(err)
		case <-time.After(30 * time.Second):
			for _, a := range holders {
				a.Close() // drops the holders' locks, so that b's raise (and b.Close) can finish
			}
			<-done
			t.Fatalf("round %d: a raise waited 30s behind the other handles' same-epoch writes", round)
		}
	}
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
}

// TestWriterPreference: a process that takes the shared lock from scratch
// queues behind a raiser that is already waiting, even though flock(2)
// itself would grant it at once. The injected fault: a locker outside the
// protocol (as a process running an older version would) holds the fence
// file shared and keeps the raiser waiting.
func TestWriterPreference(t *testing.T) {
	dir := t.TempDir()
	a, b := open(t, dir), open(t, dir)
	ctx := context.Background()
	if err := a.Do(ctx, "r", ep(5, "x"), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	path := fenceFile(t, dir)
	waitFor(t, func() bool { return exclusiveFree(t, path) }, "a to let its idle shared lock go")
	outsider, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer outsider.Close()
	if err := unix.Flock(int(outsider.Fd()), unix.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	raised := make(chan error, 1)
	go func() { raised <- b.Admit(ctx, "r", ep(6, "x")) }()
	intent, err := os.Open(strings.TrimSuffix(path, ".fence") + ".intent")
	if err != nil {
		t.Fatal(err)
	}
	defer intent.Close()
	waitFor(t, func() bool {
		if unix.Flock(int(intent.Fd()), unix.LOCK_SH|unix.LOCK_NB) != nil {
			return true
		}
		unix.Flock(int(intent.Fd()), unix.LOCK_UN)
		return false
	}, "the raiser to take the intent lock")
	var ran atomic.Bool
	done := make(chan error, 1)
	go func() {
		done <- a.Do(ctx, "r", ep(5, "x"), func(context.Context) error { ran.Store(true); return nil })
	}()
	select {
	case err := <-done:
		t.Fatalf("a writer overtook a waiting raiser: Do = %v, write ran: %v", err, ran.Load())
	case err := <-raised:
		t.Fatalf("the raise returned (%v) while the fence file was locked shared", err)
	case <-time.After(50 * time.Millisecond): // the outsider's hold, the injected fault
	}
	unix.Flock(int(outsider.Fd()), unix.LOCK_UN)
	if err := recv(t, raised, "the raise after the outsider let go"); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, done, "the queued writer after the outsider let go"); !errors.Is(err, storageguard.ErrStale) {
		t.Fatalf("the queued writer's Do = %v, want ErrStale", err)
	}
	if ran.Load() {
		t.Fatal("a write under the old epoch ran")
	}
}

// TestStickySameProcessRaise (issue test iii): a raise in this process
// while other goroutines write under the current epoch: it waits for them,
// completes, and the older epoch is refused from then on. Timers that would
// never fire show that the in-process path does not depend on them.
func TestStickySameProcessRaise(t *testing.T) {
	d := openWith(t, t.TempDir(), dirfence.Options{Linger: time.Hour, Probe: time.Hour})
	ctx := context.Background()
	if err := d.Admit(ctx, "r", ep(1, "a")); err != nil {
		t.Fatal(err)
	}
	var (
		clock atomic.Int64
		mu    sync.Mutex
		spans []fencetest.Span
		wg    sync.WaitGroup
		stop  atomic.Bool
		top   atomic.Uint64
	)
	top.Store(1)
	errc := make(chan error, 8)
	record := func(term uint64) func(context.Context) error {
		return func(context.Context) error {
			s := fencetest.Span{Term: term, Start: clock.Add(1)}
			s.End = clock.Add(1)
			mu.Lock()
			spans = append(spans, s)
			mu.Unlock()
			return nil
		}
	}
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				term := top.Load()
				if err := d.Do(ctx, "r", ep(term, "a"), record(term)); err != nil && !errors.Is(err, storageguard.ErrStale) {
					errc <- err
					return
				}
			}
		}()
	}
	for round := 0; round < 50; round++ {
		next := top.Load() + 1
		done := make(chan error, 1)
		go func() { done <- d.Do(ctx, "r", ep(next, "a"), record(next)) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case err := <-errc:
			t.Fatal(err)
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: a raise in this process waited 30s", round)
		}
		top.Store(next)
		if err := d.Do(ctx, "r", ep(next-1, "a"), record(next-1)); !errors.Is(err, storageguard.ErrStale) {
			t.Fatalf("round %d: term %d after raising to %d: %v", round, next-1, next, err)
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if err := fencetest.CheckSpans(spans); err != nil {
		t.Fatal(err)
	}
}

// TestCloseReleasesStickyLocks (issue test v): Close with shared locks
// held and timers armed stops every goroutine and drops every lock.
func TestCloseReleasesStickyLocks(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	dir := t.TempDir()
	d, err := dirfence.OpenWith(dir, dirfence.Options{Linger: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		r := fmt.Sprintf("r%d", i)
		if err := d.Admit(ctx, r, ep(2, "a")); err != nil {
			t.Fatal(err)
		}
		if err := d.Do(ctx, r, ep(2, "a"), func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.fence"))
	if len(files) != 5 {
		t.Fatalf("fence files: %v", files)
	}
	for _, f := range files {
		if exclusiveFree(t, f) {
			t.Fatalf("%s: no shared lock held before Close", f)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !exclusiveFree(t, f) {
			t.Fatalf("%s: still locked after Close", f)
		}
	}
	goleak.VerifyNone(t, ignore)
	// A Close while a raiser waits in another handle lets it through.
	a, b := openWith(t, dir, dirfence.Options{Linger: time.Hour, Probe: time.Hour}), open(t, dir)
	if err := a.Do(ctx, "r0", ep(2, "a"), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.Admit(ctx, "r0", ep(3, "b")) }()
	select {
	case err := <-done:
		t.Fatalf("raise returned (%v) while another handle held the shared lock with no probe", err)
	case <-time.After(20 * time.Millisecond): // the injected fault: a holder that never probes
	}
	a.Close()
	if err := recv(t, done, "the raise after the holder closed"); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkDirRaiseUnderLoad measures how long a raise from another process
// waits (Admit, including its fdatasync) while this process runs unbroken
// same-epoch Dos on the resource from two goroutines, beside the same raise
// with this process idle (holding no lock). Reported: median and max per
// raise, in µs.
func BenchmarkDirRaiseUnderLoad(b *testing.B) {
	for _, load := range []int{0, 2} {
		b.Run(fmt.Sprintf("writers=%d", load), func(b *testing.B) {
			dir := b.TempDir()
			d, err := dirfence.Open(dir)
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			ctx := context.Background()
			var top atomic.Uint64
			top.Store(1)
			if err := d.Admit(ctx, "r", ep(1, "n1")); err != nil {
				b.Fatal(err)
			}
			cmd := childCmd(b, "dirraiseserve", envPath+"="+dir, envResource+"=r")
			stdin, err := cmd.StdinPipe()
			if err != nil {
				b.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				b.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			defer func() { stdin.Close(); cmd.Wait() }()
			var (
				wg     sync.WaitGroup
				stop   atomic.Bool
				writes atomic.Int64
			)
			for g := 0; g < load; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for !stop.Load() {
						err := d.Do(ctx, "r", ep(top.Load(), "n1"), func(context.Context) error { writes.Add(1); return nil })
						var se *storageguard.StaleError
						if errors.As(err, &se) {
							top.CompareAndSwap(se.Presented.Term, se.Highest.Term)
						} else if err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			defer func() { stop.Store(true); wg.Wait() }()
			sc := bufio.NewScanner(stdout)
			var waits []float64
			term := uint64(1)
			for b.Loop() {
				if load > 0 {
					// Let the load follow the last raise and hold the lock again.
					n := writes.Load()
					for writes.Load() < n+100 {
						time.Sleep(50 * time.Microsecond) // poll interval
					}
				}
				term++
				fmt.Fprintln(stdin, term)
				if !sc.Scan() {
					b.Fatal("raiser child died")
				}
				ns, err := strconv.ParseInt(sc.Text(), 10, 64)
				if err != nil {
					b.Fatalf("child said %q", sc.Text())
				}
				waits = append(waits, float64(ns)/1e3)
			}
			slices.Sort(waits)
			b.ReportMetric(waits[len(waits)/2], "µs-median-raise")
			b.ReportMetric(waits[len(waits)-1], "µs-max-raise")
		})
	}
}
