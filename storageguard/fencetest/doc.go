// Package fencetest is the conformance suite of storageguard.Fence: the
// behaviour every fence must have, as functions that a fence's own tests
// call. termfence's fences (storageguard's Memory, boltfence, dirfence,
// sqlfence, pgfence) all run it, and a new backend — say, a Redis fence —
// shows that it keeps the same promises by running it too:
//
//	func TestRedis(t *testing.T) {
//		fencetest.Run(t, fencetest.Kind{
//			Open: func(t *testing.T) storageguard.Fence { return openRedisFence(t) },
//		})
//	}
//
// What it checks:
//
//   - Run: the admission rule on every method (Kleppmann's tokens 33 and
//     34 in "How to do distributed locking", 2016,
//     stale, conflicting, foreign and malformed epochs, bad resource names),
//     a failed or panicking write, cancelled contexts (before the write: no
//     write; during it: the hold stays until the write returns), Close; that writes
//     under one epoch run together and that a raise waits for the writes of
//     the older epoch; random concurrent epochs checked against
//     docs/DESIGN.md I4 (CheckSpans); and, with Kind.Reopen, that every raise
//     survives closing and reopening (I5).
//
//   - TwoHandles: two fences over one durable state see and exclude each
//     other.
//
//   - MultiProcess and CrashDurability (unix): several processes share the
//     fence, and a process killed with SIGKILL while it raises loses no
//     acknowledged raise. They re-run the test binary as the child
//     processes; call RunChild first in TestMain.
//
//   - TxAtomic and TxSameEpochConcurrent: a fence that runs the
//     application's own transaction commits the check and the write
//     together or not at all.
//
//   - BenchSameEpoch and BenchRaise: the figures every fence reports, beside
//     the unguarded baseline they are measured against.
//
//   - StableBeforeUse (unix, with strace): on a child process's real system
//     calls, replayed as a power cut, every raise is on stable storage
//     (written and synced, new names' directories synced) before the write
//     runs or Admit returns. A bbolt file opened NoSync, a dirfence raise
//     without its fdatasync, or SQLite below synchronous=FULL fail it.
//
//   - PowerLoss (unix, with a PowerDisk such as powerfs, root and
//     /dev/fuse): child processes raise while the power is cut under them
//     (torn writes, failed fsyncs); after every cut each acknowledged
//     raise is there and each refused term stays refused, shown by losing
//     what was not synced rather than by reading system calls.
//     PowerLossControl runs it on a fence with a sync removed and fails
//     unless the loss is caught.
//
//   - CancelHolds: cancelling the caller's context while the write (or a
//     transaction's function) runs does not release the admission; Run
//     checks it on every fence's Do.
//
// What it does not check: anything about a particular store's own failure
// modes (a lost database session, a failing disk: each fence's own tests
// inject those). Spy wraps a fence for tests of what sits in front of one.
//
// The package imports testing; import it from _test.go files only.
package fencetest
