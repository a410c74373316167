// Package storageguard is the storage side of termfence: a [Fence] keeps,
// per resource, the highest epoch (fencing token) it has accepted and
// refuses writes under older ones, so that a deposed Raft leader — paused,
// partitioned, or simply slow to learn that it lost — cannot write after its
// successor.
//
// This package is the core, and imports only package epoch and the standard
// library: the [Fence] interface, the admission rule [Decide], the [Guard]
// that verifies tokens from the wire, the in-memory fence [Memory], the
// building block [Cached] and [Store] for fences over a store that one
// process owns, and the errors. Each fence that needs a dependency lives in
// a package of its own, so that a program links only the one it uses:
//
//   - storageguard/boltfence: one bbolt file, for a single storage process;
//   - storageguard/dirfence: a directory of flock(2)ed files, for several
//     processes sharing a disk (unix only);
//   - storageguard/sqlfence: a table in SQLite or PostgreSQL through
//     database/sql, with the check inside the application's transaction;
//   - storageguard/pgfence: the same PostgreSQL table through pgx;
//   - storageguard/pgtrigger: the check inside PostgreSQL, a trigger that
//     guards a table against every client (psql, batch jobs, other
//     languages) with pgfence's table and lock protocol;
//   - storageguard/httpfence: a fencing HTTP proxy and middleware;
//   - objectfence (beside this package, since the AWS SDK it brings in
//     has packages named transport): fenced writes to an S3-compatible
//     object store, each one conditional PUT. It is its own API, not a
//     Fence (the store holds no lock across a write);
//   - storageguard/fencetest: the conformance suite every fence passes.
//
// # Guarantees
//
// Every fence applies [Decide] (docs/DESIGN.md I4, the check moves into the
// write): Do runs the write only if its epoch is not older than the
// resource's highest, as one step with the check; an equal term naming
// another leader is refused ([ErrConflict]), as is another cluster's epoch
// ([ErrForeignCluster]). Writes under the current epoch run concurrently; a
// newer epoch waits for the writes still running under the older one, and
// from then on the older one is refused ([ErrStale]).
//
// The context bounds the wait to get in, never the hold: a call checks it
// before it waits and before the write, and a raise waiting for the writes
// still running under an older epoch gives up when it ends (except
// dirfence's); but once the write runs, the fence holds its admission until
// the write returns, whatever happens to the context (the write sees it end
// and may stop early). A client that goes away cannot let a newer epoch in
// beside its write.
//
// The durable fences make a raise durable before the write runs and never
// lower a high-water mark (I5). A [Guard] refuses a token that is missing,
// malformed, unsigned or badly signed, or that names another cluster than
// its own, before the fence is touched (I6), so a forged token with a huge
// term can never raise the fence.
//
// # Non-guarantees
//
//   - Every write path must go through the fence (I7): a batch job or an
//     operator that writes the resource directly is unfenced — except a
//     PostgreSQL table guarded by storageguard/pgtrigger, where the
//     database itself refuses them.
//   - Reads are not fenced by default. Check refuses a stale epoch without
//     raising, but a read that passed Check can be stale by the time it is
//     used.
//   - Fencing refuses; it does not undo. Changes a stale leader made before
//     its successor's first write stay. Make each write atomic or
//     idempotent.
//   - Several resources each need a fence: fencing one of two stores a
//     leader writes leaves partial updates on the other.
//   - [Memory] is not durable: a restarted process admits a deposed leader
//     again.
//   - With [epoch.Plain] as its Verifier a Guard authenticates nothing;
//     that must be asked for: a Guard with no Verifier refuses every token
//     ([ErrNoVerifier]).
//   - A fence that decides outside the process is as strong as what holds
//     its lock. Over SQL (storageguard/sqlfence, storageguard/pgfence), Do's
//     write runs outside the database while a database session holds the
//     lock: if that session ends (killed, timed out, its link cut), a newer
//     epoch can be admitted beside the write; Do then returns an error
//     matching [ErrFenceLost], never nil, but cannot undo the write. Tx,
//     which writes in the same transaction as the check, is the way to make
//     a write to the same database safe.
//   - dirfence's raise waiting for another process's in-flight writes does
//     not give up when its context ends (flock(2) cannot be interrupted);
//     waits for this process's own writes do.
//
// A write function may call the fence for the same resource only with the
// context it was given (or one derived from it). The in-process fences
// (Memory, Cached, boltfence, dirfence) then let the call join the write's
// hold, past a raise waiting for it, and refuse a nested call that would
// raise with ErrNestedRaise; every wait of theirs ends with its context. A
// nested call with an unrelated context, or through a fence that holds in
// a database, may wait for the write that made it: for ever, if nothing
// bounds its context.
package storageguard
