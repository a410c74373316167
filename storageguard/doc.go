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
//     processes sharing a disk.
//   - OpenSQL: a table in SQLite or PostgreSQL; SQL.Tx makes the check part
//     of the application's own transaction.
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
//     waits for them; cancelling does not abandon the wait.
//
// A write function must not call the fence for the same resource: a raise
// waiting for the outer write would deadlock with it.
package storageguard
