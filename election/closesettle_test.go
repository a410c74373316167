package election

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"
)

// TestEndOnClose: every kind of raft future wait is given takes the stop
// channel as its ShutdownCh — so a raft upgrade that moves the field fails
// here, not as a goroutine leak under load — and still gives raft's own
// answer while stop is open. (That an unanswered one returns
// ErrRaftShutdown is raft's deferError.Error; no test can make raft drop a
// future at will, and goleak at the end of the package sees the helper
// that would be left.)
func TestEndOnClose(t *testing.T) {
	c := newCluster(t, 3)
	ld, _ := c.leader()
	r := ld.el.Raft()
	var idx uint64
	for _, k := range []struct {
		name string
		f    raft.Future
	}{
		{"Apply", r.Apply([]byte("x"), 0)},
		{"ApplyLog in indexFuture", indexFuture{r.ApplyLog(raft.Log{Data: []byte("x")}, 0), &idx}},
		{"Barrier", r.Barrier(0)},
		{"VerifyLeader", r.VerifyLeader()},
		{"AddNonvoter", r.AddNonvoter("nv", "127.0.0.1:1", 0, 0)},
		{"RemoveServer", r.RemoveServer("nv", 0, 0)},
	} {
		stop := make(chan struct{})
		if !endOnClose(k.f, stop) {
			t.Errorf("%s (%T): no ShutdownCh to set", k.name, k.f)
			continue
		}
		// Under load the leader may lose its term while a future waits:
		// the future then ends with that error, an end all the same.
		if err := k.f.Error(); err != nil && !errors.Is(err, raft.ErrLeadershipLost) && !errors.Is(err, raft.ErrNotLeader) {
			t.Errorf("%s: %v", k.name, err)
		}
	}
	if endOnClose(errFuture{}, make(chan struct{})) {
		t.Error("endOnClose set a field on a future that is not raft's")
	}
}

// errFuture is a future of another kind than raft's.
type errFuture struct{}

func (errFuture) Error() error { return nil }
