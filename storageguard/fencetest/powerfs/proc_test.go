package powerfs

import (
	"bufio"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/termfence/termfence/internal/testwait"
)

// threadExitScript holds a file open in a second thread, says "ready" and
// ends its main thread alone (the exit system call, not exit_group): the
// process's own stat then reads zombie while the second thread still runs
// and holds the file. The second thread ends the process when its standard
// input closes.
const threadExitScript = `
import ctypes, os, sys, threading
f = open(sys.argv[1], "w")
def hold():
    sys.stdin.read()
    os._exit(0)
threading.Thread(target=hold).start()
print("ready", flush=True)
ctypes.CDLL(None).syscall(60, 0)
`

// TestAliveUntilEveryThreadExits: a process whose main thread has exited
// still runs and still holds its files; Cut and Unmount must wait for it
// and find its files, or the unmount fails with EBUSY. Fails when alive
// or uses look at the main thread only.
func TestAliveUntilEveryThreadExits(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is needed to end a main thread alone")
	}
	dir := t.TempDir()
	cmd := exec.Command(py, "-c", threadExitScript, filepath.Join(dir, "held"))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("script: %q, %v", line, err)
	}
	pid := cmd.Process.Pid
	leader := "/proc/" + strconv.Itoa(pid) + "/stat"
	deadline := time.Now().Add(testwait.Bound(5 * time.Second))
	for statAlive(leader) {
		if time.Now().After(deadline) {
			t.Fatal("the main thread did not exit")
		}
		time.Sleep(time.Millisecond)
	}
	if !alive(pid) {
		t.Error("alive: false while a thread of the process still runs")
	}
	if !uses(strconv.Itoa(pid), dir) {
		t.Error("uses: false while a thread of the process holds a file under the directory")
	}
	stdin.Close()
	cmd.Wait()
	if alive(pid) {
		t.Error("alive: true after the process was reaped")
	}
}
