//go:build linux

package netlab_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/termfence/termfence/internal/netlab"
	"github.com/termfence/termfence/internal/netlab/netlabtest"

	"github.com/termfence/termfence/internal/testwait"
)

// TestCommandRunsInHost starts this test binary inside a host with
// Host.Command: its process is the program itself, not ip (so signals
// reach it), it runs in the host's namespace, and it serves on the host's
// address, reachable from another host.
func TestCommandRunsInHost(t *testing.T) {
	lab := netlabtest.New(t, netlab.Names("h", 2)...)
	h1, h2 := lab.Host("h1"), lab.Host("h2")
	ctx := ctxT(t, time.Minute)
	cmd := h2.Command(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), "NETLAB_TEST_CHILD=nsid", "NETLAB_TEST_ADDR="+h2.HostPort(port))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	rd := bufio.NewReader(out)
	line, err := rd.ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("child: %q, %v", line, err)
	}
	self, _ := os.Executable()
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", cmd.Process.Pid)); err != nil || exe != self {
		t.Errorf("the command's process runs %q (%v), want the program itself, %s", exe, err, self)
	}
	c, err := h1.DialContext(ctx, "tcp", h2.HostPort(port))
	if err != nil {
		t.Fatalf("dial the child from h1: %v", err)
	}
	defer c.Close()
	ino, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat("/run/netns/" + h2.Namespace())
	if err != nil {
		t.Fatal(err)
	}
	if want := strconv.FormatUint(inode(st), 10); strings.TrimSpace(ino) != want {
		t.Errorf("child's network namespace %s, want h2's %s", strings.TrimSpace(ino), want)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("child: %v", err)
	}
}

// labOf returns the names in /run/netns that belong to labs of pid.
func labOf(t *testing.T, pid int) []string {
	t.Helper()
	ents, err := os.ReadDir("/run/netns")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), fmt.Sprintf("tfl-%d-", pid)) {
			out = append(out, e.Name())
		}
	}
	return out
}

// runChild runs this test binary with -test.run=name and
// NETLAB_TEST_CHILD=name, and returns the lines it printed until it exited
// or printed "ready" (then the process is still running).
func runChild(t *testing.T, name string, waitReady bool) (*exec.Cmd, []string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v")
	cmd.Env = append(os.Environ(), "NETLAB_TEST_CHILD="+name)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if waitReady && strings.Contains(sc.Text(), "CHILD ready") {
			return cmd, lines
		}
	}
	_ = cmd.Wait()
	return cmd, lines
}

// TestSweepAfterKill: a process that built a lab, with a process of its own
// left running inside, is SIGKILLed, so nothing of its own runs; its lab is
// stale. Sweep kills the leftover process and removes every namespace of
// it, and leaves a live lab (this test's) alone.
func TestSweepAfterKill(t *testing.T) {
	netlabtest.Require(t)
	mine := netlabtest.New(t, "a")
	cmd, lines := runChild(t, "TestChildBuildsAndWaits", true)
	if cmd.ProcessState != nil {
		t.Fatalf("child exited before it was ready:\n%s", strings.Join(lines, "\n"))
	}
	var orphan int
	for _, l := range lines {
		if _, v, ok := strings.Cut(l, "CHILD orphan "); ok {
			orphan, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	pid := cmd.Process.Pid
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	stale := labOf(t, pid)
	if len(stale) != 3 {
		t.Fatalf("the killed child's lab: %q, want 3 namespaces (switch and 2 hosts)", stale)
	}
	if orphan == 0 || syscall.Kill(orphan, 0) != nil {
		t.Fatalf("the process left inside the killed child's lab (pid %d) is not running", orphan)
	}
	removed, err := netlab.Sweep(context.Background())
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	for _, n := range stale {
		if !strings.Contains(strings.Join(removed, " "), n) {
			t.Errorf("Sweep did not report %s (removed %q)", n, removed)
		}
	}
	if left := labOf(t, pid); len(left) != 0 {
		t.Errorf("after Sweep: %q", left)
	}
	if !gone(orphan, 10*time.Second) {
		t.Errorf("the process inside the stale lab (pid %d) still runs after Sweep", orphan)
	}
	for _, n := range mine.Namespaces() {
		if _, err := os.Stat(filepath.Join("/run/netns", n)); err != nil {
			t.Errorf("Sweep removed this process's live lab: %s: %v", n, err)
		}
	}
	if err := mine.Host("a").Do(func() error { return nil }); err != nil {
		t.Errorf("live lab after Sweep: %v", err)
	}
}

// gone waits until pid has exited (or is a zombie nobody reaps).
func gone(pid int, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && strings.HasPrefix(string(b[i+1:]), " Z") {
			return true
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
	return false
}

// TestChildBuildsAndWaits is TestSweepAfterKill's child: it builds a lab,
// starts a process inside it that does not die with it (no Pdeathsig), and
// waits to be killed.
func TestChildBuildsAndWaits(t *testing.T) {
	if os.Getenv("NETLAB_TEST_CHILD") != "TestChildBuildsAndWaits" {
		t.Skip("child of TestSweepAfterKill")
	}
	lab, err := netlab.New(context.Background(), netlab.Config{Hosts: []string{"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	cmd := lab.Host("b").Command(context.Background(), os.Args[0])
	cmd.Env = append(os.Environ(), "NETLAB_TEST_CHILD=sleep")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // survives its parent
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Ready once ip has entered the namespace and run the program.
	self, _ := os.Executable()
	for {
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", cmd.Process.Pid)); exe == self {
			break
		}
		time.Sleep(time.Millisecond) // poll interval
	}
	fmt.Printf("CHILD orphan %d\n", cmd.Process.Pid)
	fmt.Println("CHILD ready")
	time.Sleep(time.Hour) // until SIGKILL
}

// TestCleanupOnPanic: a test that panics with a lab from netlabtest.New
// leaves no namespace behind (the cleanup runs on the panic), before any
// Sweep could remove it.
func TestCleanupOnPanic(t *testing.T) {
	netlabtest.Require(t)
	cmd, lines := runChild(t, "TestChildPanics", false)
	out := strings.Join(lines, "\n")
	if !strings.Contains(out, "CHILD built tfl-") || !strings.Contains(out, "panic: on purpose") {
		t.Fatalf("the child did not build a lab and panic:\n%s", out)
	}
	if left := labOf(t, cmd.Process.Pid); len(left) != 0 {
		t.Errorf("a panicking test left %q", left)
	}
}

// TestChildPanics is TestCleanupOnPanic's child.
func TestChildPanics(t *testing.T) {
	if os.Getenv("NETLAB_TEST_CHILD") != "TestChildPanics" {
		t.Skip("child of TestCleanupOnPanic")
	}
	lab := netlabtest.New(t, "a", "b")
	fmt.Println("CHILD built", lab.Name())
	panic("on purpose")
}

// TestCloseKillsProcesses: Close kills a process still running in a host,
// even one that would outlive its parent.
func TestCloseKillsProcesses(t *testing.T) {
	t.Parallel()
	netlabtest.Require(t)
	lab, err := netlab.New(ctxT(t, time.Minute), netlab.Config{Hosts: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	defer lab.Close()
	cmd := lab.Host("a").Command(context.Background(), os.Args[0])
	cmd.Env = append(os.Environ(), "NETLAB_TEST_CHILD=sleep")
	cmd.SysProcAttr = nil // no Pdeathsig
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	self, _ := os.Executable()
	for exe := ""; exe != self; exe, _ = os.Readlink(fmt.Sprintf("/proc/%d/exe", cmd.Process.Pid)) {
		time.Sleep(time.Millisecond) // poll interval: until ip has run the program
	}
	if err := lab.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
			t.Errorf("process ended with %v, want SIGKILL", err)
		}
	case <-time.After(testwait.Bound(10 * time.Second)):
		_ = cmd.Process.Kill()
		<-done
		t.Fatal("Close left a process running in the lab")
	}
}

// TestSkipsWithoutNetAdmin runs TestLab and TestCommandRunsInHost in a
// child whose capability bounding set lacks CAP_NET_ADMIN (setpriv from
// util-linux): they must skip, saying what is missing, not fail.
func TestSkipsWithoutNetAdmin(t *testing.T) {
	netlabtest.Require(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("skipping: needs setpriv (util-linux) to drop CAP_NET_ADMIN")
	}
	cmd := exec.Command(setpriv, "--bounding-set", "-net_admin", "--inh-caps", "-net_admin",
		os.Args[0], "-test.run=^(TestLab|TestCommandRunsInHost)$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "NETLAB_TEST_CHILD=nocap")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child without CAP_NET_ADMIN: %v\n%s", err, out)
	}
	for _, name := range []string{"TestLab", "TestCommandRunsInHost"} {
		if !strings.Contains(string(out), "--- SKIP: "+name) {
			t.Errorf("%s did not skip without CAP_NET_ADMIN:\n%s", name, out)
		}
	}
	if !strings.Contains(string(out), "needs CAP_NET_ADMIN (run as root)") {
		t.Errorf("the skip does not say what is missing:\n%s", out)
	}
}

// TestCommandSurvivesDo: a program started with Host.Command dies with
// the thread that started it (Pdeathsig), and Host.Do runs on a thread of
// its own: Do must not end a thread that started a program. Go locks a
// new goroutine to whatever thread runs it, often the one its creator was
// on, so a Do right after a Start from the same goroutine would end the
// starting thread and SIGKILL the program if Do discarded its threads.
func TestCommandSurvivesDo(t *testing.T) {
	t.Parallel()
	lab := netlabtest.New(t, "a", "b")
	a, b := lab.Host("a"), lab.Host("b")
	own := threadNS(t)
	var cmds []*exec.Cmd
	var dones []chan struct{}
	for range 4 {
		cmd := a.Command(context.Background(), os.Args[0])
		cmd.Env = append(os.Environ(), "NETLAB_TEST_CHILD=sleep")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		cmds, dones = append(cmds, cmd), append(dones, done)
		t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
		// What a harness does next: talk to the lab through a host.
		for range 50 {
			if err := b.Do(func() error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx := ctxT(t, 10*time.Second)
	for range 200 {
		if c, err := b.DialContext(ctx, "tcp", a.HostPort(1)); err == nil {
			c.Close()
		}
	}
	for i, cmd := range cmds {
		select {
		case <-dones[i]:
			t.Errorf("program %d (pid %d) ended while Do ran: %v", i, cmd.Process.Pid, cmd.ProcessState)
		default:
		}
	}
	// The threads Do released are back in this process's namespace.
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := threadNS(t); got != own {
				t.Errorf("a thread runs in namespace %d after Do, want this process's %d", got, own)
			}
		}()
	}
	wg.Wait()
	// Do still runs in the host.
	var ino uint64
	if err := b.Do(func() error {
		st, err := os.Stat("/proc/thread-self/ns/net")
		if err == nil {
			ino = inode(st)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat("/run/netns/" + b.Namespace())
	if err != nil {
		t.Fatal(err)
	}
	if ino != inode(st) {
		t.Errorf("Do ran in namespace %d, want b's %d", ino, inode(st))
	}
}

// threadNS returns the inode of the network namespace of the thread the
// calling goroutine runs on (locked while it looks).
func threadNS(t *testing.T) uint64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	st, err := os.Stat("/proc/thread-self/ns/net")
	if err != nil {
		t.Error(err)
		return 0
	}
	return inode(st)
}
