package election

import (
	"reflect"
	"time"

	"github.com/hashicorp/raft"
)

// settle waits, for at most d, until raft's FSM queue is empty, before
// Close shuts raft down. A batch of committed entries still queued for
// raft's FSM goroutine when Shutdown runs is dropped with its futures
// unanswered, and a goroutine waiting on one of them (wait's helper) would
// never end; the batch being applied when Shutdown runs is finished and
// answered. Closing a node that is no longer leader adds no entries of its
// own, so the queue only drains.
func (e *Election) settle(d time.Duration) {
	if e.raft.State() == raft.Shutdown {
		return // shut down already (a crash): too late, and Stats would log
	}
	deadline := time.Now().Add(d)
	for e.raft.Stats()["fsm_pending"] != "0" && time.Now().Before(deadline) {
		if e.raft.State() == raft.Shutdown {
			return
		}
		time.Sleep(time.Millisecond) // poll: raft offers no notification for it
	}
}

// endOnClose makes f.Error return raft.ErrRaftShutdown once stop is closed,
// if raft has not answered f by then. raft's futures wait on an exported
// ShutdownCh field beside their answer, but raft v1.7.2 sets it only on its
// own restore futures, so an Apply, Barrier or VerifyLeader future dropped
// at shutdown blocks its Error forever: goleak found such a helper of wait
// at the end of go test -race -count=3 ./election/ beside two CPU burners,
// in two runs of two. The field is reached by reflection, as the futures'
// types are not exported; raft itself never reads it, so setting it before
// the helper calls Error races with nothing. Once stop is closed, Error may
// return ErrRaftShutdown even for a future raft answered (it picks one of
// two ready channels): only wait's helper, which calls it once and whose
// caller has then returned ErrClosed, may be given such a future.
// TestEndOnClose pins the field on every kind of future wait is given.
func endOnClose(f raft.Future, stop chan struct{}) bool {
	if w, ok := f.(indexFuture); ok {
		f = w.ApplyFuture
	}
	v := reflect.ValueOf(f)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return false
	}
	ch := v.Elem().FieldByName("ShutdownCh")
	if !ch.IsValid() || !ch.CanSet() || ch.Type() != reflect.TypeOf(stop) || !ch.IsNil() {
		return false
	}
	ch.Set(reflect.ValueOf(stop))
	return true
}
