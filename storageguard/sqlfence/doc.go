// Package sqlfence is a storageguard.Fence in a table of an SQL database
// reached through database/sql (SQLite or PostgreSQL), and the way to make
// the check part of the transaction that writes: Fence.Tx runs the
// application's function in the transaction that checks, and if newer
// raises, the epoch — the classic conditional write "UPDATE … WHERE fence <= :token", made
// general. It imports no driver: open the *sql.DB with one of your choice
// (modernc.org/sqlite, pgx's stdlib).
//
// # Guarantees
//
//   - Tx: the check, the raise and the caller's writes commit together or
//     not at all; a refused epoch's function never runs, and a write under
//     an epoch that became stale before the commit does not commit
//     (docs/DESIGN.md I4).
//   - Do and Admit: a raise is committed on its own (durable, I5) before the
//     write runs; the write then runs while a transaction holds the fence
//     row's lock (FOR SHARE on PostgreSQL, the database's write lock on
//     SQLite), so no newer epoch is admitted until it returns. On SQLite a
//     raise is refused (ErrNotDurable) on a connection below
//     synchronous=FULL, whose commit would not be synced, in journal_mode
//     OFF or MEMORY, and in journal_mode DELETE below synchronous=EXTRA
//     (its commit, the journal's unlink, is synced only at EXTRA): power
//     cuts on a filesystem that loses what was not synced
//     (TestSQLitePowerLoss, powerfs) lost acknowledged raises in each.
//     Every transaction of the fence on SQLite, raise or not, is refused
//     (ErrNotDurable) on a connection at synchronous=OFF, in journal_mode
//     OFF or MEMORY, or in a rollback journal below synchronous=FULL: a
//     checkpoint at OFF writes an earlier raise's pages into the database
//     unsynced and lets the next commit reuse the WAL over the synced
//     frames that held it, losing the raise at a cut; the fence checks
//     whichever connection of the pool each of its transactions runs on.
//     Open syncs the SQLite database file's name and the path of every
//     directory on the way to it (SQLite syncs neither), so a database in
//     a directory the application just created survives a power cut.
//   - The context bounds the wait to get in (the lock, the check, the
//     raise), never the hold: the transaction is begun under a context
//     that the caller's cancellation does not reach (database/sql would
//     roll it back, and release the lock, the moment the caller's context
//     ended), and ends within 5 s once the write or fn has returned.
//   - Do's transaction turns the session's idle_in_transaction_session_timeout
//     off and commits after the write: if that commit fails (the session,
//     and the lock, may have gone while the write ran), Do returns an error
//     matching storageguard.ErrFenceLost, never the write's nil.
//   - Several processes may share the database: its locks make the check
//     and the write one step for all of them. Same-epoch transactions run
//     concurrently on PostgreSQL; SQLite has one writer per database, and
//     the transactions of one Fence queue for it first come first served
//     (SQLite's busy handler alone let a writer wait over 5 s behind 700
//     newer ones; TestSQLiteTxFirstComeFirstServed).
//   - Serialization failures, deadlocks and a busy SQLite database are
//     retried a bounded number of times with backoff.
//
// # Non-guarantees
//
//   - Do's write is outside the transaction: it is as strong as the
//     database session that holds the lock while it runs. A session that
//     ends under it (pg_terminate_backend, a server restart, a cut link)
//     lets a newer epoch in beside the write; Do reports it
//     (storageguard.ErrFenceLost) but cannot prevent or undo it. To write
//     to the same database, use Tx: its writes roll back with the fence.
//   - Tx's function may run more than once (retries): it must have no
//     effects outside the transaction.
//   - On SQLite, a Tx's function or a Do's write that calls Tx, Do or
//     Admit on the same Fence waits for itself until its context ends.
//     Writers in other processes still meet at SQLite's busy handler.
//   - Writes that do not go through the fence (I7), such as another
//     program's SQL on the same table, and reads.
//   - Terms above 2^63-1 do not fit the BIGINT column and are refused.
//   - On SQLite, connections the fence never uses: another *sql.DB or
//     process on the same file, or a connection of the pool that only the
//     application writes or closes on. Any of them at synchronous=OFF
//     undoes acknowledged raises at its next checkpoint (a commit past
//     wal_autocheckpoint, or the close of the database's last
//     connection), and the fence cannot see it. Open every handle on the
//     file with _pragma=synchronous(FULL) (modernc.org/sqlite's DSN
//     parameter; mattn/go-sqlite3's is _sync=FULL) and
//     _pragma=journal_mode(WAL), never run PRAGMA synchronous=OFF on it,
//     and send writes to the guarded database through Tx, where their
//     connection is checked.
package sqlfence
