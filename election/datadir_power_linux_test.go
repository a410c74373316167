package election

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/storageguard/fencetest/powerfs"
)

// The data directory durable from the first byte, whatever state its path
// was in before the node started (docs/DESIGN.md I3): a data directory
// that already existed but was never synced (systemd's StateDirectory=
// makes one just before the first start), parents that exist unsynced at
// any depth, and the snapshots raft writes into it.

const envDurableChild = "TERMFENCE_ELECTION_DURABLE_CHILD"

// runDurableChild plays a child's part of these tests and exits; where
// envDurableChild is unset it returns.
func runDurableChild() {
	role := os.Getenv(envDurableChild)
	if role == "" {
		return
	}
	fail := func(what string, err error) {
		fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
		os.Exit(1)
	}
	n := &raftNode{}
	_, _, snaps, err := n.openStores(Config{DataDir: os.Getenv(envPowerDir)})
	if err != nil {
		fail("open stores", err)
	}
	switch role {
	case "snapshot":
		// What raft does on a snapshot (raft's snapshot.go, takeSnapshot):
		// Create, the FSM's Persist writes, Close; once Close returned,
		// raft compacts its log behind the snapshot.
		sink, err := snaps.Create(raft.SnapshotVersionMax, 10, 3, raft.Configuration{}, 1, nil)
		if err != nil {
			fail("create snapshot", err)
		}
		if _, err := io.WriteString(sink, "the FSM's state"); err != nil {
			fail("write snapshot", err)
		}
		if err := sink.Close(); err != nil {
			fail("close snapshot", err)
		}
		fmt.Println("snapshot")
		select {} // until the power goes
	case "read-snapshot":
		metas, err := snaps.List()
		if err != nil {
			fail("list snapshots", err)
		}
		if len(metas) == 0 {
			fmt.Println("none")
			os.Exit(0)
		}
		_, rc, err := snaps.Open(metas[0].ID)
		if err != nil {
			fail("open snapshot", err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			fail("read snapshot", err)
		}
		fmt.Printf("%d %d %s\n", metas[0].Term, metas[0].Index, b)
		os.Exit(0)
	}
	os.Exit(2)
}

// durableChild runs this test binary as a child in role on the data
// directory dir and returns its first line of output; with wait it leaves
// the child running, tracked by disk, for the cut to end.
func durableChild(t *testing.T, disk *powerfs.Disk, env []string, wait bool) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	disk.Track(cmd.Process.Pid)
	sc := bufio.NewScanner(out)
	line := ""
	if sc.Scan() {
		line = sc.Text()
	}
	if !wait {
		io.Copy(io.Discard, out)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child %v: %v: %s", env, err, stderr.String())
		}
		return line
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line == "" {
		t.Fatalf("child %v said nothing: %s", env, stderr.String())
	}
	return line
}

// voteCutRead has a node's stores vote in term 7 in the data directory
// rel on disk, cuts the power once the vote is answered, and returns the
// term and vote a new process reads back ("7 n2" if they survived).
func voteCutRead(t *testing.T, disk *powerfs.Disk, rel string) string {
	t.Helper()
	dir := filepath.Join(disk.Dir(), rel)
	if got := durableChild(t, disk, []string{envPowerDir + "=" + dir, envPowerChild + "=vote"}, true); got != "voted" {
		t.Fatalf("%s: the node did not vote: %q", rel, got)
	}
	if err := disk.PowerCut(false); err != nil {
		t.Fatal(err)
	}
	return durableChild(t, disk, []string{envPowerDir + "=" + dir, envPowerChild + "=read"}, false)
}

// TestPowerCutPreexistingDataDir: a node whose data directory (or one of
// its parents) existed before it started, but was never synced, keeps its
// term and vote through a power cut. The old sync stopped at the nearest
// directory that existed before the start, so a data directory made by
// systemd's StateDirectory= (or any mkdir without a sync of its parent)
// vanished at the cut with raft.db in it: term 0, no vote, and the node
// could vote again in term 7 for another candidate.
func TestPowerCutPreexistingDataDir(t *testing.T) {
	t.Parallel()
	disk := powerfs.MountTest(t, powerfs.Options{})
	cases := []struct {
		name, made, dataDir string // made: created by "another process", unsynced
	}{
		{"data dir made by systemd", "state/n1", "state/n1"},
		{"parent made, data dir new", "var/lib", "var/lib/termfence/n1"},
		{"grandparent made, rest new", "srv", "srv/a/b/n1"},
		{"nothing made", "", "fresh/n1"},
	}
	for _, c := range cases {
		if c.made != "" {
			if err := os.MkdirAll(filepath.Join(disk.Dir(), c.made), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if got := voteCutRead(t, disk, c.dataDir); got != "7 n2" {
			t.Errorf("%s (%s): after the power cut the node's term and vote are %q, want \"7 n2\"", c.name, c.dataDir, got)
		}
	}
}

// TestPowerCutKeepsSnapshot: a snapshot whose sink closed successfully (after
// which raft compacts its log behind it) survives a power cut, in a data
// directory made on this start. raft creates snapshots/ after the data
// directory was synced and never syncs a snapshot's own directory: the
// cut took snapshots/ back, or left the snapshot's directory without its
// files.
func TestPowerCutKeepsSnapshot(t *testing.T) {
	t.Parallel()
	disk := powerfs.MountTest(t, powerfs.Options{})
	dir := filepath.Join(disk.Dir(), "data", "n1")
	if got := durableChild(t, disk, []string{envPowerDir + "=" + dir, envDurableChild + "=snapshot"}, true); got != "snapshot" {
		t.Fatalf("the node did not snapshot: %q", got)
	}
	if err := disk.PowerCut(false); err != nil {
		t.Fatal(err)
	}
	got := durableChild(t, disk, []string{envPowerDir + "=" + dir, envDurableChild + "=read-snapshot"}, false)
	if got != "3 10 the FSM's state" {
		t.Fatalf("after the power cut the snapshot store holds %q, want the snapshot of term 3, index 10 (\"3 10 the FSM's state\")", got)
	}
	st := disk.Stats().Last
	t.Logf("cut: %+v", st)
}
