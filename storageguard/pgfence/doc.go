// Package pgfence is storageguard's PostgreSQL fence for programs that use
// pgx directly (a *pgxpool.Pool) rather than database/sql.
//
// Its Tx runs the caller's function in the transaction that checks the
// epoch, as storageguard.SQL's Tx does, but sends BEGIN and the check
// (SELECT … FOR SHARE on the fence row) in one round trip with pgx's
// Batch.BeginTx. A same-epoch Tx therefore costs what the same transaction
// costs unguarded: BEGIN, the caller's statements, COMMIT. database/sql
// sends BEGIN alone, so storageguard.SQL spends one more round trip.
//
// Guarantees (the same as storageguard.SQL on PostgreSQL, over the same
// table, so the two may guard the same resources from different
// processes):
//   - the check and the caller's writes commit together or not at all; a
//     refused epoch's function never runs;
//   - transactions under the current epoch hold the fence row FOR SHARE and
//     run concurrently; a raise holds it FOR UPDATE, so it waits for them,
//     and afterwards they are refused (storageguard.ErrStale);
//   - a raise is durable when its transaction commits (PostgreSQL's WAL;
//     with synchronous_commit off it is not);
//   - serialization failures and deadlocks are retried a bounded number of
//     times with backoff, so the function may run more than once.
//
// Not guaranteed: anything the function does outside its transaction;
// fencing of writes that do not go through the fence; read-only
// transactions (the lock needs a writable transaction: ErrReadOnly).
package pgfence
