// Package pgfence is a storageguard.Fence in a PostgreSQL table for
// programs that use pgx directly (a *pgxpool.Pool) rather than
// database/sql.
//
// Its Tx runs the caller's function in the transaction that checks the
// epoch, as storageguard/sqlfence's Tx does, but sends BEGIN and the check
// (SELECT … FOR SHARE on the fence row) in one round trip with pgx's
// Batch.BeginTx: a same-epoch Tx costs what the same transaction costs
// unguarded (BEGIN, the caller's statements, COMMIT), where database/sql
// spends one more round trip.
//
// # Guarantees
//
// The same as sqlfence on PostgreSQL, over the same table, so the two may
// guard the same resources from different processes:
//
//   - The check and the caller's writes commit together or not at all; a
//     refused epoch's function never runs (docs/DESIGN.md I4).
//   - Transactions under the current epoch hold the fence row FOR SHARE and
//     run concurrently; a raise holds it FOR UPDATE, so it waits for them,
//     and afterwards they are refused (storageguard.ErrStale).
//   - A raise is durable when its transaction commits (I5: PostgreSQL's
//     WAL): the raising transaction commits with synchronous_commit on,
//     whatever the role or session says, even if Tx's function lowered it.
//   - A raise waits only for the transactions that held the resource when
//     it asked: each transaction takes the resource's advisory lock (shared,
//     or exclusive for a raise) just before the row lock, and PostgreSQL
//     queues later shared requests behind a waiting exclusive one, so a
//     stream of same-epoch transactions cannot starve a raise.
//   - Serialization failures and deadlocks are retried a bounded number of
//     times with backoff, so the function may run more than once.
//   - The context bounds the wait to get in, never the hold: once the
//     function (or Do's write) runs, the commit is made whatever happens to
//     the context, bounded by 5 s.
//   - Do's transaction turns the session's idle_in_transaction_session_timeout
//     off and commits after the write; if that commit fails (the session,
//     and the lock, may have gone while the write ran), Do returns an error
//     matching storageguard.ErrFenceLost, never the write's nil.
//
// # Non-guarantees
//
//   - Anything the function does outside its transaction. Do's write (not
//     in the transaction) is as strong as the database session that holds
//     the lock while it runs: a session that ends under it lets a newer
//     epoch in beside the write, which Do reports (ErrFenceLost) but cannot
//     undo. Tx is the way to make a write to the same database safe.
//   - Writes that do not go through the fence (I7), such as another
//     program's SQL on the same table. storageguard/pgtrigger closes that
//     hole: it guards the table inside the database, against the same
//     fence row and with the same lock protocol, so a table it guards can
//     be written by pgfence's Tx (presenting the token with
//     pgtrigger.Present) and by any other client alike.
//   - Read-only transactions: the lock needs a writable transaction
//     (ErrReadOnly).
//   - Raises on a fence table that storageguard/pgtrigger guards: a role
//     that does not own termfence_fence may raise a row of a cluster whose
//     key is in the database only under that epoch's token. Open a fence
//     with OpenWith and Options.Signer for such a role; without it, its
//     raises are refused (pgtrigger.Refusal: storageguard.ErrUnauthenticated).
package pgfence
