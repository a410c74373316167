package powerfs

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Tests through the mount: what programs see, and what a cut leaves.

func writeFile(t *testing.T, path, s string, sync bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func syncDir(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

func cut(t *testing.T, d *Disk, torn bool) CutStats {
	t.Helper()
	st, err := d.Cut(CutOptions{Torn: torn})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func read(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

func TestDiskSyncedSurvivesUnsyncedDoesNot(t *testing.T) {
	d := MountTest(t, Options{})
	p := filepath.Join(d.Dir(), "f")
	writeFile(t, p, "one", true)
	syncDir(t, d.Dir())
	writeFile(t, filepath.Join(d.Dir(), "unsynced"), "x", false)
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("TWO"), 0)
	f.Close()
	if got := read(p); got != "TWO" {
		t.Fatalf("before the cut the file reads %q", got)
	}
	st := cut(t, d, false)
	if got := read(p); got != "one" {
		t.Fatalf("after the cut the file reads %q, want the synced %q", got, "one")
	}
	if _, err := os.Stat(filepath.Join(d.Dir(), "unsynced")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a file created after the last directory sync survived the cut: %v", err)
	}
	if st.LostFiles < 1 || st.LostEntries < 1 {
		t.Fatalf("cut stats %+v", st)
	}
}

func TestDiskRenameNeedsDirSync(t *testing.T) {
	d := MountTest(t, Options{})
	a, tmp := filepath.Join(d.Dir(), "a"), filepath.Join(d.Dir(), "tmp")
	writeFile(t, a, "old", true)
	syncDir(t, d.Dir())
	writeFile(t, tmp, "new", true)
	if err := os.Rename(tmp, a); err != nil {
		t.Fatal(err)
	}
	cut(t, d, false)
	if got := read(a); got != "old" {
		t.Fatalf("an unsynced rename survived the cut: a reads %q", got)
	}
	writeFile(t, tmp, "new", true)
	if err := os.Rename(tmp, a); err != nil {
		t.Fatal(err)
	}
	syncDir(t, d.Dir())
	cut(t, d, false)
	if got := read(a); got != "new" {
		t.Fatalf("a synced rename was lost: a reads %q", got)
	}
}

func TestDiskCutEndsProcessesOnIt(t *testing.T) {
	d := MountTest(t, Options{})
	// The shell enters the mount after exec: a child started with cmd.Dir
	// on the mount changes directory between fork and exec, while the Go
	// runtime of this process (the disk's server) holds syscall.ForkLock,
	// and once hung there for good.
	cmd := exec.Command("sh", "-c", `cd "$1" && echo in && exec sleep 1000`, "sh", d.Dir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "in\n" {
		t.Fatalf("the child did not enter the mount: %q, %v", line, err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	st := cut(t, d, false)
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the process on the mount was not killed by the cut: %v", err)
	}
	if st.Killed != 1 {
		t.Fatalf("cut stats %+v, want 1 killed", st)
	}
}

func TestDiskCutRefusesWhileCallerHoldsAFile(t *testing.T) {
	d := MountTest(t, Options{})
	f, err := os.Create(filepath.Join(d.Dir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Cut(CutOptions{}); !errors.Is(err, ErrBusy) {
		t.Fatalf("Cut with a file open here = %v, want ErrBusy", err)
	}
	f.Close()
	cut(t, d, false)
}

func TestDiskFailSync(t *testing.T) {
	d := MountTest(t, Options{Seed: 1})
	p := filepath.Join(d.Dir(), "f")
	writeFile(t, p, "", true)
	syncDir(t, d.Dir())
	lost := 0
	for i := 0; i < 16; i++ {
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt(make([]byte, 8*blockSize), 0)
		f.Sync()
		f.WriteAt([]byte{1, 2, 3}, 0)
		d.FailSync("f")
		if err := f.Sync(); !errors.Is(err, syscall.EIO) {
			t.Fatalf("armed sync returned %v, want EIO", err)
		}
		b := make([]byte, 3)
		f.ReadAt(b, 0)
		if b[0] != 1 {
			t.Fatal("data not readable after a failed sync")
		}
		if err := f.Sync(); err != nil {
			t.Fatalf("the sync after a failed one: %v", err)
		}
		f.Close()
		cut(t, d, false)
		if read(p)[0] != 1 {
			lost++
		}
	}
	if lost == 0 || lost == 16 {
		t.Fatalf("after a failed sync and a successful one, the data was lost in %d of 16 cuts: want sometimes", lost)
	}
	if s := d.Stats(); s.FailedSyncs != 16 || s.Cuts != 16 {
		t.Fatalf("stats %+v", s)
	}
}

func TestDiskFlockExcludesAcrossProcesses(t *testing.T) {
	d := MountTest(t, Options{})
	p := filepath.Join(d.Dir(), "lock")
	writeFile(t, p, "", false)
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	// flock(1) from util-linux, in another process, must not get it.
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("flock(1) not installed")
	}
	out, err := exec.Command("flock", "-n", p, "true").CombinedOutput()
	if err == nil {
		t.Fatalf("a second process took an exclusive flock held here: %s", out)
	}
}
