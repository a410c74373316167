//go:build unix

package fencetest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/termfence/termfence/epoch"
)

// StraceEnv names the strace binary StableBeforeUse runs; empty: "strace"
// on the PATH.
const StraceEnv = "TERMFENCE_STRACE"

// markPrefix starts the lines a "syncer" child writes to stderr where the
// fence handed control back: the points at which a raise must be on
// stable storage.
const markPrefix = "fencetest-mark:"

// childSyncer raises three resources, each several times, through Admit and
// through Do, and marks on stderr each moment the fence hands control back
// after a raise: inside Do's write, and after Admit returned; and a
// same-epoch Do's write.
func childSyncer(d Durable) int {
	f, err := d.Open(os.Getenv(envPath))
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	defer f.Close()
	ctx := context.Background()
	mark := func(what string, r string, t uint64) {
		fmt.Fprintf(os.Stderr, "%s %s %s %d\n", markPrefix, what, r, t)
	}
	for _, r := range []string{"stable/a", "stable/b", "stable/c"} {
		for t := uint64(1); t <= 5; t += 2 {
			e := epoch.Epoch{Cluster: "payments", Term: t, Leader: "n1"}
			if err := f.Admit(ctx, r, e); err != nil {
				fmt.Fprintln(os.Stderr, "admit:", err)
				return 1
			}
			mark("admitted", r, t)
			e.Term++
			for range 2 { // a raise, then the same epoch again
				if err := f.Do(ctx, r, e, func(context.Context) error { mark("write", r, e.Term); return nil }); err != nil {
					fmt.Fprintln(os.Stderr, "do:", err)
					return 1
				}
			}
		}
	}
	return 0
}

// StableBeforeUse checks, on the real system calls of a child process, that
// every raise is on stable storage before the fence lets the write run or
// Admit return (docs/DESIGN.md I5): a process kill keeps the page cache, so
// only this, or a power cut, tells a missing fsync.
//
// The child (this test binary, see RunChild) opens d at a fresh path and
// raises three resources several times through Admit and Do, under strace,
// which logs every write, truncation, rename, fsync and fdatasync it makes;
// the child marks on stderr each point where the fence handed control
// back. The log is then replayed as a power-cut model: a file written to is
// volatile until it is fsynced or fdatasynced, a new name (a file created,
// a rename) is volatile until its directory is fsynced, and at every mark
// nothing of the fence's state (the path, what lies under it, and files
// beside it whose names start with it) may be volatile, except files volatile reports as holding nothing
// that must survive (a SQLite -shm index, a lock file). Nothing is ever
// trusted to the page cache. The test skips, saying why, when strace
// (StraceEnv) is missing or cannot trace here.
func StableBeforeUse(t *testing.T, d Durable, volatile func(path string) bool) {
	t.Helper()
	straceBin := os.Getenv(StraceEnv)
	if straceBin == "" {
		straceBin = "strace"
	}
	bin, err := exec.LookPath(straceBin)
	if err != nil {
		t.Skipf("StableBeforeUse needs strace (Debian package strace, or %s): %v", StraceEnv, err)
	}
	if out, err := exec.Command(bin, "-f", "-qq", "-o", os.DevNull, "true").CombinedOutput(); err != nil {
		t.Skipf("strace cannot trace here: %v: %s", err, out)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "fence")
	logPath := filepath.Join(t.TempDir(), "strace.log")
	child := childCmd("syncer", envPath+"="+path)
	args := append([]string{"-f", "-qq", "-y", "-s", "256", "-o", logPath,
		"-e", "trace=mkdir,mkdirat,open,openat,creat,write,pwrite64,writev,pwritev,pwritev2,ftruncate,fallocate,fsync,fdatasync,sync_file_range,rename,renameat,renameat2,link,linkat",
		"-e", "signal=none",
		child.Path}, child.Args[1:]...)
	cmd := exec.Command(bin, args...)
	cmd.Env = child.Env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("syncer child under strace: %v\n%s", err, out)
	}
	marks, syncs, err := replayStable(logPath, path, volatile)
	if err != nil {
		t.Fatal(err)
	}
	if marks != 3*3*3 {
		t.Fatalf("the trace has %d marks, want %d: strace did not record the child's writes to stderr", marks, 3*3*3)
	}
	if syncs == 0 {
		t.Fatal("the trace has no fsync or fdatasync under the fence's path at all")
	}
	t.Logf("%d marks, %d syncs under %s, nothing volatile at any mark", marks, syncs, path)
}

var (
	// straceLine: "PID syscall(args) = ret", or the first or second half
	// of a call another thread interrupted.
	straceCall    = regexp.MustCompile(`^\d+ +(\w+)\((.*)\) += (-?\d+\S*)`)
	straceStart   = regexp.MustCompile(`^(\d+) +(\w+)\((.*) <unfinished \.\.\.>$`)
	straceResumed = regexp.MustCompile(`^(\d+) +<\.\.\. (\w+) resumed>(.*)\) += (-?\d+\S*)`)
	// fdPath is the path strace -y prints after a file descriptor.
	fdPath  = regexp.MustCompile(`^-?\d+<([^>]*)>`)
	strArgs = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)
)

// replayStable replays an strace log (see StableBeforeUse) and returns the
// number of marks and of syncs of files under root, or the first mark at
// which something under root was volatile.
func replayStable(logPath, root string, volatile func(string) bool) (marks, syncs int, err error) {
	f, err := os.Open(logPath)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	// The fence's state: root itself, what lies below it, and its siblings
	// named after it (a SQLite file's -wal).
	under := func(p string) bool { return strings.HasPrefix(p, root) }
	dirty := map[string]string{} // path -> the call that made it volatile
	created := map[string]bool{} // files the trace created (the state starts empty)
	pending := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		var name, args, ret string
		if m := straceCall.FindStringSubmatch(line); m != nil {
			name, args, ret = m[1], m[2], m[3]
		} else if m := straceStart.FindStringSubmatch(line); m != nil {
			pending[m[1]+" "+m[2]] = m[3]
			continue
		} else if m := straceResumed.FindStringSubmatch(line); m != nil {
			key := m[1] + " " + m[2]
			name, args, ret = m[2], pending[key]+m[3], m[4]
			delete(pending, key)
		} else {
			continue
		}
		if strings.HasPrefix(ret, "-") {
			continue // failed: changed nothing, synced nothing
		}
		fd := ""
		if m := fdPath.FindStringSubmatch(args); m != nil {
			fd = m[1]
		}
		switch name {
		case "write", "writev":
			if strings.Contains(args, markPrefix) {
				marks++
				for p, why := range dirty {
					if volatile == nil || !volatile(p) {
						return marks, syncs, fmt.Errorf("strace log line %d: the fence handed control back (%s) while %s was not on stable storage (%s, not synced since)", n, markOf(args), p, why)
					}
				}
				continue
			}
			fallthrough
		case "pwrite64", "pwritev", "pwritev2", "ftruncate", "fallocate":
			if under(fd) {
				dirty[fd] = fmt.Sprintf("%s at line %d", name, n)
			}
		case "fsync", "fdatasync":
			if under(fd) || fd == filepath.Dir(root) {
				syncs++
				delete(dirty, fd)
			}
		case "openat", "open", "creat":
			// The first open that may create a file (the state starts
			// empty) adds a name to its directory.
			m := fdPath.FindStringSubmatch(ret)
			if m == nil || !under(m[1]) || created[m[1]] || (name != "creat" && !strings.Contains(args, "O_CREAT")) {
				continue
			}
			created[m[1]] = true
			dirty[filepath.Dir(m[1])] = fmt.Sprintf("%s of %s at line %d", name, filepath.Base(m[1]), n)
		case "mkdir", "mkdirat":
			// A new directory is a new name in its parent.
			strs := strArgs.FindAllStringSubmatch(args, -1)
			if len(strs) == 0 {
				continue
			}
			p := strs[len(strs)-1][1]
			if !filepath.IsAbs(p) {
				if m := fdPath.FindStringSubmatch(args); m != nil {
					p = filepath.Join(m[1], p)
				}
			}
			if under(p) {
				dirty[filepath.Dir(p)] = fmt.Sprintf("%s of %s at line %d", name, filepath.Base(p), n)
			}
		case "sync_file_range":
			// Not a durability barrier (no metadata, no drive cache flush).
		case "rename", "renameat", "renameat2", "link", "linkat":
			// The new name's directory: the last path-like argument.
			dir := renameTargetDir(args)
			if under(dir) || dir == filepath.Dir(root) {
				dirty[dir] = fmt.Sprintf("%s at line %d", name, n)
			}
		}
	}
	return marks, syncs, sc.Err()
}

// renameTargetDir returns the directory of a rename's or link's new name:
// for rename(old, new) the directory of new; for renameat(olddirfd, old,
// newdirfd, new) newdirfd's path (joined with new's directory part).
func renameTargetDir(args string) string {
	strs := strArgs.FindAllStringSubmatch(args, -1)
	if len(strs) == 0 {
		return ""
	}
	newName := strs[len(strs)-1][1]
	if filepath.IsAbs(newName) {
		return filepath.Dir(newName)
	}
	// The new directory descriptor precedes the new name.
	parts := strings.Split(args, ", ")
	for i := len(parts) - 1; i >= 0; i-- {
		if strings.HasPrefix(parts[i], `"`+newName) && i > 0 {
			if m := fdPath.FindStringSubmatch(parts[i-1]); m != nil {
				return filepath.Join(m[1], filepath.Dir(newName))
			}
		}
	}
	return ""
}

func markOf(args string) string {
	if m := strArgs.FindStringSubmatch(args); m != nil {
		return strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(m[1], markPrefix), `\n`))
	}
	return "mark"
}
