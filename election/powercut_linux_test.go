package election

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/termfence/termfence/storageguard/fencetest/powerfs"
)

// A node's persisted term under a power cut (docs/DESIGN.md I2: no node's
// term or vote goes back). The node's stores run in a child process on a
// powerfs disk, the power is cut, and another process reads them back.

const (
	envPowerChild = "TERMFENCE_ELECTION_POWER_CHILD"
	envPowerDir   = "TERMFENCE_ELECTION_POWER_DIR"
	envPowerSkip  = "TERMFENCE_ELECTION_POWER_SKIP"
)

// runPowerChild plays a child's part and exits; elsewhere it returns.
func runPowerChild() {
	runNodeChild()    // nodepower_linux_test.go
	runDurableChild() // datadir_power_linux_test.go
	runSearchChild()  // powersearch_linux_test.go
	role := os.Getenv(envPowerChild)
	if role == "" {
		return
	}
	skipDataDirSync = os.Getenv(envPowerSkip) != ""
	n := &raftNode{}
	_, stable, _, err := n.openStores(Config{DataDir: os.Getenv(envPowerDir)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open stores:", err)
		os.Exit(1)
	}
	switch role {
	case "vote":
		// What raft does on granting a vote in a new term (raft.go,
		// requestVote: setCurrentTerm, then persistVote): both synced by
		// raft-boltdb before the vote is answered.
		if err := stable.SetUint64([]byte("CurrentTerm"), 7); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := stable.Set([]byte("LastVoteCand"), []byte("n2")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("voted")
		select {} // until the power goes
	case "read":
		term, _ := stable.GetUint64([]byte("CurrentTerm"))
		cand, _ := stable.Get([]byte("LastVoteCand"))
		fmt.Printf("%d %s\n", term, cand)
		n.closeStores()
		os.Exit(0)
	}
	os.Exit(2)
}

// termAfterCut starts a node's stores in a new data directory on a powerfs
// disk, has it vote in term 7, cuts the power once the vote is answered,
// and returns what a new process reads back.
func termAfterCut(t *testing.T, skip bool) string {
	t.Helper()
	disk := powerfs.MountTest(t, powerfs.Options{})
	dir := filepath.Join(disk.Dir(), "nodes", "n1")
	env := []string{envPowerDir + "=" + dir}
	if skip {
		env = append(env, envPowerSkip+"=1")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append(env, envPowerChild+"=vote")...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	disk.Track(cmd.Process.Pid)
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "voted" {
		t.Fatalf("the node did not vote: %q, %s", sc.Text(), stderr.String())
	}
	if err := disk.PowerCut(false); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	rd := exec.Command(os.Args[0], "-test.run=^$")
	rd.Env = append(os.Environ(), envPowerDir+"="+dir, envPowerChild+"=read")
	rd.Stderr = &stderr
	b, err := rd.Output()
	if err != nil {
		t.Fatalf("reading the stores after the cut: %v: %s", err, stderr.String())
	}
	return strings.TrimSpace(string(b))
}

// TestPowerCutKeepsTermAndVote: a node that answered a vote in term 7 on a
// new data directory still holds term 7 and its vote after a power cut.
// Before the data directory was synced (raft-boltdb syncs raft.db, never
// the name of it), the cut took raft.db back: term 0, no vote, and the
// node could vote again in term 7 for another candidate (I2).
func TestPowerCutKeepsTermAndVote(t *testing.T) {
	t.Parallel()
	if got := termAfterCut(t, false); got != "7 n2" {
		t.Fatalf("after the power cut the node's term and vote are %q, want \"7 n2\"", got)
	}
}

// TestPowerCutKeepsTermAndVoteControl: the same without the data
// directory's fsync (the test-only knob skipDataDirSync) loses them.
func TestPowerCutKeepsTermAndVoteControl(t *testing.T) {
	t.Parallel()
	if got := termAfterCut(t, true); got == "7 n2" {
		t.Fatalf("control: without the data directory's sync the term and vote survived (%q): the test cannot see the loss", got)
	}
}
