// Package storageguard is the storage side of termfence: it keeps, per
// resource, the highest epoch (fencing token) it has accepted and refuses
// writes under older ones, so that a deposed Raft leader — paused, partitioned,
// or simply slow to learn that it lost — cannot write after its successor.
//
// A Fence applies one pure admission rule, Decide, under locks and I/O:
//
//   - NewMemory: in memory, per-resource read-write locks; not durable.
//   - OpenBolt: one bbolt file, for a single storage process.
//   - OpenDir: a directory of fence files with flock(2), for several
//     processes sharing a disk. A process keeps a resource's shared lock
//     between its writes (OpenDirWith tunes how long), so a write under the
//     current epoch makes no system call; a raise in another process makes
//     it let go within about a millisecond.
//   - OpenSQL: a table in SQLite or PostgreSQL; SQL.Tx makes the check part
//     of the application's own transaction.
//   - package pgfence: the same PostgreSQL table through a pgx pool; its Tx
//     sends the check with BEGIN, so it costs no round trip of its own.
//
// # Guarantees
//
// I4, the check moves into the write. Do admits an epoch and runs the write
// as one step: the write runs only if the epoch is not older than the
// resource's highest; an equal term naming another leader is refused
// (ErrConflict), as is another cluster's epoch (ErrForeignCluster). Writes
// under the current epoch run concurrently (except on SQLite, which has one
// writer per database); a newer epoch waits for the writes still running
// under the older one, and from then on the older epoch is refused
// (ErrStale). For the file and SQL fences this holds between processes too.
//
// I5, durability. Bolt, Dir and SQL make a raise durable (fsync, or the
// database's commit) before Do runs the write or Admit returns, and never
// lower a high-water mark: reopening after a restart or a crash keeps every
// acknowledged raise.
//
// I7, every write path goes through the guard. A fence protects only what
// is written through it: a batch job, a second service or an operator that
// writes the resource directly is unfenced, and so is the whole resource.
//
// # Non-guarantees
//
//   - Reads are not fenced by default. Check refuses a stale epoch without
//     raising, but a read that passed Check can still be stale by the time
//     it is used, and a deposed leader can read old data and act on it
//     elsewhere (send an e-mail, call an API).
//   - Fencing rejects; it does not undo. Changes a stale leader made before
//     its successor's first write stay. Make each write atomic (SQL.Tx) or
//     idempotent.
//   - Several resources each need a fence. A leader that writes a database
//     and an object store must present its epoch to both; fencing one gives
//     partial updates from stale leaders on the other.
//   - Memory is not durable: a restarted process admits a deposed leader
//     again. Use it for tests and process-lifetime resources.
//   - The epoch is only as trustworthy as its source: tokens from the wire
//     must be verified (the Guard does), or one forged huge term locks every
//     real leader out for good.
//   - Contexts: a call checks its context before waiting and before write,
//     but a raise already waiting for in-flight writes (Memory, Bolt, Dir)
//     waits for them, and so does a Dir write queued behind another
//     process's raise; cancelling does not abandon the wait.
//
// # Guard, proxy and middleware
//
// A [Fence] trusts the epoch it is given. A [Guard] is what sits between the
// wire and a fence: it turns an untrusted token into an epoch (verifying its
// signature and its cluster, DESIGN.md I6) and only then lets the fence see
// it, so a forged token with a huge term can never raise the fence and lock
// real leaders out. [NewProxy] puts a Guard in front of any HTTP resource that
// cannot check tokens itself (a fencing proxy: the proxy is the serialization
// point, and must be the only path to the resource, I7); [Middleware] puts one
// in front of a Go handler that owns its storage.
//
// Guarantees of Guard, proxy and middleware:
//
//   - A token that is missing, malformed, unsigned or badly signed (with a
//     signing Verifier), or that names another cluster than GuardConfig.Cluster,
//     is refused before the fence is touched: it neither raises nor reads it.
//   - The write (the forwarded request, the wrapped handler) runs inside the
//     fence's Do, so it runs only under an admitted epoch, and no newer epoch is
//     admitted until every in-flight write under an older one has returned.
//     The proxy returns from the write only after the backend's response has
//     been copied to the client in full, or after it was cut off at
//     ProxyConfig.Timeout.
//   - Writes under the same epoch run concurrently.
//   - The proxy retries a request to the backend only when a pooled
//     connection failed before any response byte and the request is
//     replayable (GET, HEAD, OPTIONS, TRACE or with an Idempotency-Key, and
//     without a body); any other failure is answered 502 and not repeated.
//     Its default transport keeps up to 256 idle HTTP/1.1 connections to the
//     backend (ProxyConfig.Transport replaces it).
//
// Non-guarantees:
//
//   - With no Verifier (or [epoch.Plain]) nothing is authenticated: anyone who
//     can reach the Guard can present any epoch.
//   - A request that reaches the resource around the proxy is unfenced.
//   - Fencing refuses; it does not undo. A backend that keeps working on a
//     request after the proxy cut it off at the timeout may still apply it,
//     possibly after a newer epoch was admitted. Set the timeout above the
//     backend's own.
//   - Reads are not fenced unless they carry a token; a read admitted under an
//     epoch can be stale by the time the client uses it.
//
// A write function must not call the fence for the same resource: a raise
// waiting for the outer write would deadlock with it.
package storageguard
