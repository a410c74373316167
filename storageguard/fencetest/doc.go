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
//   - Run: the admission rule on every method (the seed's tokens 33 and 34,
//     stale, conflicting, foreign and malformed epochs, bad resource names),
//     a failed or panicking write, cancelled contexts, Close; that writes
//     under one epoch run together and that a raise waits for the writes of
//     the older epoch; random concurrent epochs checked against
//     docs/DESIGN.md I4 (CheckSpans); and, with Kind.Reopen, that every raise
//     survives closing and reopening (I5).
//   - TwoHandles: two fences over one durable state see and exclude each
//     other.
//   - MultiProcess and CrashDurability (unix): several processes share the
//     fence, and a process killed with SIGKILL while it raises loses no
//     acknowledged raise. They re-run the test binary as the child
//     processes; call RunChild first in TestMain.
//   - TxAtomic and TxSameEpochConcurrent: a fence that runs the
//     application's own transaction commits the check and the write
//     together or not at all.
//   - BenchSameEpoch and BenchRaise: the figures every fence reports, beside
//     the unguarded baseline they are measured against.
//
// What it does not check: that a raise is on stable storage (a killed
// process keeps the page cache; only a power loss would tell), and anything
// about a particular store's own failure modes. Spy wraps a fence for tests
// of what sits in front of one.
//
// The package imports testing; import it from _test.go files only.
package fencetest
