package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/internal/dirsync"
	"github.com/termfence/termfence/storageguard/internal/pgproto"
	"github.com/termfence/termfence/storageguard/internal/txretry"
)

// Dialect selects the SQL spoken by an SQL fence.
type Dialect int

const (
	// SQLite is SQLite 3.24 or later (for example modernc.org/sqlite, driver
	// name "sqlite"). SQLite allows one writer per database, so every Tx and
	// Do on it takes the database's write lock: same-epoch writers run one
	// at a time. The transactions of one Fence queue for that lock in the
	// order they asked (SQLite's busy handler polls, and alone can keep a
	// writer waiting for seconds while newer ones get through), so a Tx's
	// fn or a Do's write must not call Tx, Do or Admit on the same Fence:
	// it would wait for itself until its ctx ends. Open the database with a busy timeout (for modernc:
	// "file.db?_pragma=busy_timeout(5000)"); an in-memory database must be
	// shared by all connections of the pool.
	SQLite Dialect = iota + 1
	// Postgres is PostgreSQL 9.5 or later (for example
	// github.com/jackc/pgx/v5/stdlib, driver name "pgx"). Same-epoch
	// transactions hold the fence row FOR SHARE and run concurrently; a
	// raise holds it FOR UPDATE, so it waits for them — only for those that
	// held it when it asked: each takes the resource's advisory lock first,
	// and later ones queue behind the raise. A raise commits with
	// synchronous_commit on, whatever the role or session says.
	Postgres
)

func (d Dialect) String() string {
	switch d {
	case SQLite:
		return "sqlite"
	case Postgres:
		return "postgres"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// ErrBadDialect is returned by Open for a Dialect it does not know.
var ErrBadDialect = errors.New("sqlfence: unknown SQL dialect")

// ErrNotDurable is returned for a transaction on a SQLite connection whose
// settings would not keep a raise durable (durability.check): for a raise,
// synchronous below FULL, journal_mode OFF or MEMORY, or DELETE below
// EXTRA, whose commit would not be on stable storage when the write runs;
// for any transaction, synchronous OFF, whose checkpoint would undo an
// earlier raise, journal_mode OFF or MEMORY, or a rollback journal below
// FULL (docs/DESIGN.md I5). Nothing is raised or written.
var ErrNotDurable = errors.New("sqlfence: database commits are not durable")

// maxAttempts bounds the retries of a transaction that failed with a
// serialization failure, a deadlock or SQLITE_BUSY.
const maxAttempts = 10

// Fence is a durable storageguard.Fence in a table of an SQL database, and
// the way to make the check part of the transaction that writes: Tx runs a
// function in the same transaction that checks (and, if newer, raises) the
// epoch, so the write commits only if the epoch is still the highest — the
// classic conditional write "UPDATE … WHERE fence <= :token", made general.
//
// The table is termfence_fence(resource BYTEA/BLOB PRIMARY KEY, cluster
// TEXT, term BIGINT, leader TEXT), created if missing (the resource name is
// stored as bytes, so any name works); on PostgreSQL it lives in
// the first schema of the connection's search_path. Terms are stored as
// BIGINT, so an epoch whose term exceeds 2^63-1 is refused (an error
// wrapping epoch.ErrMalformed).
//
// Several processes may share one database: the database's locks make the
// check and the write one step for all of them.
//
// Cost: database/sql sends BEGIN on its own, so on PostgreSQL the check is
// a round trip of its own on top of the same transaction unguarded
// (docs/PERFORMANCE.md has the figures). Programs that use pgx directly can
// use package storageguard/pgfence, which guards the same table and sends
// the check with BEGIN.
type Fence struct {
	db     *sql.DB
	d      Dialect
	closed atomic.Bool
	// noDurableCheck skips durability.check: for the control of the power-loss
	// test only (export_test.go), which must lose a raise without it.
	noDurableCheck bool

	qInsert, qLock, qSelectShared, qSelectHold, qSelectUpdate, qSelectPlain, qUpdate, qCreate string
	// PostgreSQL only: make the raising transaction's commit synchronous
	// again after a Tx's fn, which may have lowered synchronous_commit.
	qDurable string

	// SQLite only: the same-epoch path's two statements, prepared once.
	// modernc.org/sqlite compiles every unprepared statement anew, which is
	// most of the cost of the check; pgx caches its statements itself.
	stLock, stSelect *sql.Stmt
	// SQLite only: the connection's synchronous setting and journal mode,
	// read in every transaction (durability.check).
	stDurable *sql.Stmt

	// SQLite only: the turn to take the database's write lock, one
	// transaction of this Fence at a time, first come first served (a
	// channel's waiting senders are queued in order). SQLite's busy
	// handler polls with sleeps that grow to 100 ms, so without a queue a
	// writer that has waited long keeps losing the lock to newer ones:
	// measured, one Tx among 14 writers waited over 5 s (overtaken by 700
	// later ones) while the median took milliseconds. Writers of other
	// processes still meet at the busy handler.
	turn chan struct{}
}

var _ storageguard.Fence = (*Fence)(nil)

// Open returns a fence over db, creating its table if missing. The
// caller keeps ownership of db: Close does not close it.
func Open(ctx context.Context, db *sql.DB, d Dialect) (*Fence, error) {
	return open(ctx, db, d, true)
}

// open is Open; with check false (tests only: the control of the power-loss
// test) it accepts a SQLite connection whatever its settings, and so does
// every transaction of the fence.
func open(ctx context.Context, db *sql.DB, d Dialect, check bool) (*Fence, error) {
	if db == nil {
		return nil, errors.New("sqlfence: Open: nil *sql.DB")
	}
	f := &Fence{db: db, d: d}
	if d == SQLite {
		f.turn = make(chan struct{}, 1)
	}
	const cols = "cluster, term, leader FROM termfence_fence WHERE resource = "
	switch d {
	case SQLite:
		f.qInsert = "INSERT INTO termfence_fence (resource, cluster, term, leader) VALUES (?, ?, ?, ?) ON CONFLICT (resource) DO NOTHING"
		f.qSelectPlain = "SELECT " + cols + "?"
		f.qSelectShared, f.qSelectUpdate = f.qSelectPlain, f.qSelectPlain
		f.qUpdate = "UPDATE termfence_fence SET cluster = ?, term = ?, leader = ? WHERE resource = ?"
		// A write statement that matches no row (terms are > 0): it takes
		// SQLite's write lock and changes nothing.
		f.qLock = "UPDATE termfence_fence SET term = term WHERE resource = ? AND term < 0"
		f.qCreate = "CREATE TABLE IF NOT EXISTS termfence_fence (resource BLOB PRIMARY KEY, cluster TEXT NOT NULL, term INTEGER NOT NULL, leader TEXT NOT NULL)"
	case Postgres:
		f.qInsert = "INSERT INTO termfence_fence (resource, cluster, term, leader) VALUES ($1, $2, $3, $4) ON CONFLICT (resource) DO NOTHING"
		f.qSelectPlain = "SELECT " + cols + "$1"
		// FOR SHARE, not an advisory lock: measured, a plain SELECT (no
		// lock at all), FOR KEY SHARE, and pg_advisory_xact_lock_shared
		// followed by a SELECT cost the same or more; the check's cost is
		// its round trip. FOR SHARE is also right under REPEATABLE READ and
		// SERIALIZABLE (a raise committed after the snapshot fails the lock
		// with a serialization error, which is retried), where a lock taken
		// in the transaction's first statement would come after its snapshot.
		//
		// Each row lock comes after the resource's advisory lock, taken in
		// the same statement (pgproto: the turn that keeps a stream of
		// same-epoch transactions from starving a raise).
		f.qSelectShared = "SELECT cluster, term, leader, " + pgproto.LockShared("termfence_fence") +
			" FROM termfence_fence WHERE resource = $1 FOR SHARE"
		// A Do's transaction idles while the write runs outside it: turn
		// the session's idle-in-transaction timeout off for that
		// transaction only (SET LOCAL), in the same statement, so that the
		// server does not end the session, and the lock, under the write.
		f.qSelectHold = "SELECT cluster, term, leader, " + pgproto.LockShared("termfence_fence") +
			", CASE WHEN current_setting('idle_in_transaction_session_timeout') <> '0' THEN set_config('idle_in_transaction_session_timeout', '0', true) END FROM termfence_fence WHERE resource = $1 FOR SHARE"
		// A raise commits with synchronous_commit on whatever the session
		// says (pgproto.Durable), set in the statement that locks the row.
		f.qSelectUpdate = "SELECT cluster, term, leader, " + pgproto.LockExclusive("termfence_fence") + ", " + pgproto.Durable +
			" FROM termfence_fence WHERE resource = $1 FOR UPDATE"
		f.qDurable = "SELECT " + pgproto.Durable
		f.qUpdate = "UPDATE termfence_fence SET cluster = $1, term = $2, leader = $3 WHERE resource = $4"
		f.qCreate = "CREATE TABLE IF NOT EXISTS termfence_fence (resource BYTEA PRIMARY KEY, cluster TEXT NOT NULL, term BIGINT NOT NULL, leader TEXT NOT NULL)"
	default:
		return nil, fmt.Errorf("%w: %d", ErrBadDialect, int(d))
	}
	f.noDurableCheck = !check
	if d == SQLite && check {
		// The first call, not the first write, says that these settings
		// cannot keep a raise: before anything is created.
		var dur durability
		dur.sqlite = true
		err := f.retry(ctx, func() error { return db.QueryRowContext(ctx, qDurable).Scan(&dur.level, &dur.mode) })
		if err != nil {
			return nil, fmt.Errorf("sqlfence: read SQLite synchronous setting and journal mode: %w", err)
		}
		dur.mode = strings.ToLower(dur.mode)
		if err := dur.check(true); err != nil {
			return nil, fmt.Errorf("sqlfence: Open: %w", err)
		}
	}
	err := f.retry(ctx, func() error {
		_, err := db.ExecContext(ctx, f.qCreate)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlfence: create fence table (%s): %w", d, err)
	}
	if d == SQLite {
		if err := syncDatabasePath(ctx, db); err != nil {
			return nil, err
		}
		err = f.retry(ctx, func() (err error) {
			if f.stLock == nil {
				if f.stLock, err = db.PrepareContext(ctx, f.qLock); err != nil {
					return err
				}
			}
			if f.stSelect == nil {
				if f.stSelect, err = db.PrepareContext(ctx, f.qSelectShared); err != nil {
					return err
				}
			}
			f.stDurable, err = db.PrepareContext(ctx, qDurable)
			return err
		})
		if err != nil {
			for _, st := range []*sql.Stmt{f.stLock, f.stSelect} {
				if st != nil {
					st.Close()
				}
			}
			return nil, fmt.Errorf("sqlfence: prepare fence statements (%s): %w", d, err)
		}
	}
	return f, nil
}

// syncDatabasePath makes the name of a SQLite database file durable, with
// the path of every directory on the way to it, before any raise in it is
// acknowledged (I5). SQLite syncs the directory when it creates a journal
// or WAL file, never for the database file itself, and never a parent:
// a database in a directory the application just created (os.MkdirAll
// syncs nothing) vanished at a power cut with every raise in it. An
// in-memory or temporary database (an empty file name) has no path.
func syncDatabasePath(ctx context.Context, db *sql.DB) error {
	var file string
	err := db.QueryRowContext(ctx, "SELECT file FROM pragma_database_list WHERE name = 'main'").Scan(&file)
	if err != nil {
		return fmt.Errorf("sqlfence: find the SQLite database's file: %w", err)
	}
	if file == "" {
		return nil
	}
	if err := dirsync.Path(filepath.Dir(file)); err != nil {
		return fmt.Errorf("sqlfence: sync the path of %s: %w", file, err)
	}
	return nil
}

// qDurable reads a SQLite connection's synchronous setting and journal
// mode in one statement (durability.check).
const qDurable = "SELECT s.synchronous, j.journal_mode FROM pragma_synchronous AS s, pragma_journal_mode AS j"

// sqlMode is how an attempt locks the fence row.
type sqlMode int

const (
	// shared: lock the row FOR SHARE (PostgreSQL), refuse or ask for a
	// raise; no raise happens in this mode on PostgreSQL.
	shared sqlMode = iota
	// exclusive: create the row if missing, lock it FOR UPDATE, raise.
	exclusive
)

// endTimeout bounds the end (commit or rollback) of a transaction once the
// fence is held: the caller's context no longer applies, and a link cut
// mid-transaction must not hang the call for the kernel's TCP timeout.
const endTimeout = 5 * time.Second

// attempt runs one transaction: lock and read the fence row, decide, raise
// if allowed, run fn, commit. On SQLite every attempt starts with a write
// (the INSERT … DO NOTHING) so that it holds the database's write lock from
// its first statement: the lock that makes an epoch change wait.
//
// ctx bounds getting in (the lock wait, the check, the raise), never the
// hold: the transaction begins under a context that the caller's
// cancellation does not reach, since database/sql rolls a transaction back
// (releasing the lock) the moment its context ends, which would let a newer
// epoch in while fn, or a Do's write, still runs. Once fn has run the
// transaction ends within endTimeout. hold marks a Do's transaction: on
// PostgreSQL it also turns the session's idle_in_transaction_session_timeout
// off, since the session idles while the write runs outside it.
func (f *Fence) attempt(ctx context.Context, resource string, ep epoch.Epoch, mode sqlMode, raiseInTx, hold bool, fn func(*sql.Tx) error) (err error) {
	// The transaction's context: never the caller's cancellation. Over a
	// network (PostgreSQL) its end is bounded by endTimeout through a
	// cancel of its own; SQLite's commit is local (bounded by its busy
	// timeout), and a context that can end would cost a goroutine per
	// transaction in database/sql.
	txCtx, end := context.WithoutCancel(ctx), func() {}
	if f.d == Postgres {
		txCtx, end = context.WithCancel(txCtx)
	}
	defer end()
	if f.turn != nil {
		// Wait for this Fence's earlier transactions (ctx bounds the wait);
		// the turn is given back after the commit or rollback (defers run
		// in reverse order).
		select {
		case f.turn <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		defer func() { <-f.turn }()
	}
	ending := func() func() bool {
		if f.d != Postgres {
			return func() bool { return true }
		}
		return time.AfterFunc(endTimeout, end).Stop
	}
	tx, err := f.db.BeginTx(txCtx, nil)
	if err != nil {
		return err
	}
	committed := false
	defer func() {
		if !committed {
			// Also on a panic in fn: never leave the row locked.
			stop := ending()
			tx.Rollback()
			stop()
		}
	}()
	key := []byte(resource)
	inserted := false
	switch {
	case mode == exclusive || (f.d == SQLite && raiseInTx):
		// The first epoch of a resource is always a raise (Decide on a zero
		// highest): inserting it is that raise, committed with the rest.
		res, err := tx.ExecContext(ctx, f.qInsert, key, ep.Cluster, int64(ep.Term), ep.Leader)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); f.d == SQLite && (err != nil || n > 0) {
			inserted = true // a resource's first raise
		}
	case f.d == SQLite:
		// Take the write lock without changing anything: a raise must not
		// commit with (or roll back with) a write that is not in tx.
		if _, err := tx.StmtContext(ctx, f.stLock).ExecContext(ctx, key); err != nil {
			return err
		}
	}
	var dur durability
	if f.d == SQLite {
		// Every transaction, not only a raise: a commit or checkpoint on a
		// connection of this pool at synchronous=OFF would undo a raise
		// committed earlier on another (durability.check).
		if dur, err = f.readDurability(ctx, tx); err != nil {
			return err
		}
		if err := dur.check(inserted); err != nil {
			return err
		}
	}
	var row *sql.Row
	cols := 3 // PostgreSQL: the advisory lock's column, and one setting
	switch {
	case f.d == SQLite:
		// One SELECT for every mode: the write lock is already held.
		row = tx.StmtContext(ctx, f.stSelect).QueryRowContext(ctx, key)
	case mode == exclusive:
		row, cols = tx.QueryRowContext(ctx, f.qSelectUpdate, key), 5
	case hold:
		row, cols = tx.QueryRowContext(ctx, f.qSelectHold, key), 5
	default:
		row, cols = tx.QueryRowContext(ctx, f.qSelectShared, key), 4
	}
	var h epoch.Epoch
	var term int64
	var locked bool
	var setting *string
	dst := []any{&h.Cluster, &term, &h.Leader, &locked, &setting}[:cols]
	switch err := row.Scan(dst...); {
	case errors.Is(err, sql.ErrNoRows):
		h = epoch.Epoch{}
	case err != nil:
		return err
	default:
		h.Term = uint64(term)
	}
	d, err := storageguard.Decide(resource, h, ep)
	if err != nil {
		return err
	}
	if d.Raise {
		if !raiseInTx && !(mode == exclusive && fn == nil) {
			return txretry.ErrNeedRaise
		}
		if mode == shared && f.d == Postgres {
			// Never upgrade FOR SHARE to FOR UPDATE in one transaction: two
			// raisers doing so deadlock. Start over exclusively.
			return txretry.ErrNeedRaise
		}
		if err := dur.check(true); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, f.qUpdate, ep.Cluster, int64(ep.Term), ep.Leader, key); err != nil {
			return err
		}
	}
	if fn != nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			return err
		}
		if mode == exclusive && f.d == Postgres {
			// fn may have lowered synchronous_commit (SET LOCAL): the
			// raise commits with it on all the same.
			if _, err := tx.ExecContext(ctx, f.qDurable); err != nil {
				return err
			}
		}
	}
	committed = true
	defer ending()()
	return tx.Commit()
}

// durability is a SQLite connection's synchronous setting and journal
// mode, as one transaction read them; on PostgreSQL, and with the
// test-only knob noDurableCheck, it refuses nothing.
type durability struct {
	sqlite bool
	level  int    // PRAGMA synchronous: 0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA
	mode   string // PRAGMA journal_mode, lower case
}

// readDurability reads tx's connection's settings (durability.check's rule).
func (f *Fence) readDurability(ctx context.Context, tx *sql.Tx) (durability, error) {
	if f.noDurableCheck {
		return durability{}, nil
	}
	d := durability{sqlite: true}
	if err := tx.StmtContext(ctx, f.stDurable).QueryRowContext(ctx).Scan(&d.level, &d.mode); err != nil {
		return d, fmt.Errorf("sqlfence: read SQLite synchronous setting and journal mode: %w", err)
	}
	d.mode = strings.ToLower(d.mode)
	return d, nil
}

// check refuses a transaction on a SQLite connection whose settings would
// not keep a raise durable, so that a power loss cannot take back a raise
// that writes were already admitted under (I5).
//
// Every transaction, raise or not, is refused:
//
//   - at synchronous OFF: nothing is synced, not even a checkpoint, which
//     writes the pages of a raise committed earlier, on another
//     connection, into the database file unsynced and lets the next
//     commit reuse the WAL over the synced frames that held it: the raise
//     is lost at a cut. The fence checks whichever connection of the pool
//     each of its transactions runs on;
//   - in journal_mode OFF or MEMORY: a commit torn by a power cut cannot be
//     rolled back, and may tear the page that holds a raise (and with OFF
//     nothing ever syncs the directory that names a new database file: it
//     vanished in powerfs cuts, every raise with it);
//   - in a rollback journal (DELETE, TRUNCATE, PERSIST) below FULL: NORMAL
//     skips the sync between the journal and the database writes that
//     makes a torn transaction roll back whole.
//
// WAL at NORMAL is enough for a transaction that does not raise: its
// checkpoints are synced, so earlier raises stay durable. A raise itself
// (raise set) must be durable when it is acknowledged:
//
//   - synchronous below FULL: a commit in WAL mode is not synced;
//   - journal_mode DELETE below EXTRA: the commit is the journal's unlink,
//     which only EXTRA syncs; without it a power cut brings the journal
//     back and the next open rolls the committed raise back (seen in
//     powerfs cuts: TestSQLitePowerLoss/delete-full lost acknowledged
//     raises).
//
// A raise passes in WAL, TRUNCATE and PERSIST at FULL or EXTRA, and DELETE
// at EXTRA. What the fence cannot see (another *sql.DB or process on the
// same file, a connection of the pool that only the application uses)
// must follow the same rule: the package documentation says how.
func (d durability) check(raise bool) error {
	if !d.sqlite {
		return nil
	}
	if d.level < 1 {
		return fmt.Errorf("%w: SQLite synchronous is OFF on this connection, whose checkpoints can undo a raise committed on another: open every connection with _pragma=synchronous(FULL), and never set synchronous=OFF on a connection of the pool", ErrNotDurable)
	}
	switch d.mode {
	case "off", "memory":
		return fmt.Errorf("%w: SQLite journal_mode is %s, whose commits a power cut can tear or lose: use WAL (_pragma=journal_mode(WAL))", ErrNotDurable, d.mode)
	case "wal":
	default:
		if d.level < 2 {
			return fmt.Errorf("%w: SQLite journal_mode %s needs synchronous FULL (2) or EXTRA (3), not %d: a torn transaction cannot roll back whole: use _pragma=synchronous(FULL)", ErrNotDurable, strings.ToUpper(d.mode), d.level)
		}
	}
	if !raise {
		return nil
	}
	if d.level < 2 {
		return fmt.Errorf("%w: SQLite synchronous is %d, a raise needs FULL (2) or EXTRA (3): open the database with _pragma=synchronous(FULL)", ErrNotDurable, d.level)
	}
	if d.mode == "delete" && d.level < 3 {
		return fmt.Errorf("%w: SQLite journal_mode DELETE needs synchronous EXTRA (3), which syncs the journal's removal that commits, not %d: use WAL, or _pragma=synchronous(EXTRA)", ErrNotDurable, d.level)
	}
	return nil
}

// run drives attempts (txretry.Run): exclusive when a raise is needed,
// the raise committed alone first unless raiseInTx, serialization failures
// retried with backoff. hold: fn is a Do's write (txretry.Hold), run
// outside the database while the transaction holds the fence; retry says
// which errors are retried.
func (f *Fence) run(ctx context.Context, resource string, ep epoch.Epoch, raiseInTx, hold bool, retry func(error) bool, fn func(*sql.Tx) error) error {
	if f.closed.Load() {
		return storageguard.ErrClosed
	}
	if _, err := storageguard.Decide(resource, epoch.Epoch{}, ep); err != nil {
		return err
	}
	if ep.Term > math.MaxInt64 {
		return fmt.Errorf("sqlfence: %w: term %d does not fit the SQL fence's BIGINT", epoch.ErrMalformed, ep.Term)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	attempt := func(excl, withFn bool) error {
		mode := shared
		if excl {
			mode = exclusive
		}
		if !withFn {
			return f.attempt(ctx, resource, ep, exclusive, false, false, nil)
		}
		return f.attempt(ctx, resource, ep, mode, raiseInTx, hold, fn)
	}
	return txretry.Run(ctx, attempt, raiseInTx, retry, maxAttempts, "sqlfence:")
}

// retry runs op, retrying transient failures.
func (f *Fence) retry(ctx context.Context, op func() error) error {
	return txretry.Retry(ctx, op, retryable, maxAttempts)
}

// retryable reports a serialization failure or deadlock (PostgreSQL
// SQLSTATE 40001, 40P01) or a busy or locked database (SQLite result codes
// 5 and 6, with their extended codes). The drivers are recognised by their
// error methods, so this package imports neither.
func retryable(err error) bool {
	var st interface{ SQLState() string }
	if errors.As(err, &st) {
		switch st.SQLState() {
		case "40001", "40P01":
			return true
		}
	}
	var c interface{ Code() int }
	if errors.As(err, &c) {
		switch c.Code() & 0xff {
		case 5, 6: // SQLITE_BUSY, SQLITE_LOCKED
			return true
		}
	}
	return false
}

// Tx runs fn in one transaction with the check of ep for resource and, if
// ep is newer than the highest, its raise. If fn returns an error, or the
// commit fails, the transaction rolls back, raise included: nothing was
// written under ep, so nothing needs fencing. fn may run more than once: a
// transaction that fails with a serialization failure, a deadlock or a
// busy database is retried (a bounded number of times, with backoff), so fn
// must have no effects outside tx. Refusals (storageguard.ErrStale,
// ErrConflict, ErrForeignCluster, …) are returned without calling fn.
//
// On PostgreSQL a transaction under the current epoch holds the fence row
// FOR SHARE: such transactions run concurrently, and a raise (FOR UPDATE)
// waits for all of them; afterwards they are refused. The isolation level
// is the database's default; READ COMMITTED (PostgreSQL's default) makes a
// transaction waiting behind a raise see the raised row and be refused,
// stricter levels fail it with a serialization error, which is retried.
//
// ctx bounds the wait to get in (the lock, the check, the raise), never the
// hold: the transaction is not rolled back when ctx ends, so the fence is
// held until fn returns and the commit is made. To cancel the transaction,
// run fn's statements with ctx (tx.ExecContext(ctx, …)): they then fail
// once ctx ends, fn returns their error, and everything rolls back.
func (f *Fence) Tx(ctx context.Context, resource string, ep epoch.Epoch, fn func(*sql.Tx) error) error {
	if fn == nil {
		return errors.New("sqlfence: Tx: nil fn")
	}
	return f.run(ctx, resource, ep, true, false, retryable, fn)
}

// Do implements storageguard.Fence.Do. A raise is committed in a
// transaction of its own first, so it is durable before write runs; write
// then runs while a second transaction holds the fence row's lock (FOR
// SHARE on PostgreSQL, the database write lock on SQLite), so no newer
// epoch is admitted until write returns. write gets ctx, not the
// transaction: to write to the same database in the same transaction as the
// check, use Tx. write runs at most once.
//
// ctx bounds the wait to get in, never the hold: once write runs, the
// transaction lives until write returns whatever happens to ctx (write
// sees ctx end and may stop early; the fence does not). On PostgreSQL the
// transaction turns the session's idle_in_transaction_session_timeout off.
//
// Do is as strong as the database session that holds the lock: if the
// session ends while write runs (pg_terminate_backend, a server restart, a
// cut link), its lock goes with it and a newer epoch may be admitted beside
// write. Do detects that when it commits the transaction after write and
// returns an error matching storageguard.ErrFenceLost (with write's own
// error, if any), never nil: write's outcome is then unknown. Otherwise Do
// returns write's error.
//
// A Do or Admit on f and resource called inside write with write's context
// (or one derived from it) is decided against this Do's hold: under the
// same epoch it runs at once, without a transaction of its own, so that it
// cannot wait behind a newer epoch's raise that waits for this write.
func (f *Fence) Do(ctx context.Context, resource string, ep epoch.Epoch, write func(ctx context.Context) error) error {
	if write == nil {
		return f.Admit(ctx, resource, ep)
	}
	if ok, err := txretry.Nested(ctx, f, resource, ep); ok {
		// Inside a write of this fence's Do on resource: that Do's hold
		// covers this one (see txretry.Nested).
		if err != nil {
			return err
		}
		return write(ctx)
	}
	h := txretry.NewHeldHold[*sql.Tx](ctx, f, resource, ep, write)
	return h.Result(f.run(ctx, resource, ep, false, true, h.Retryable(retryable), h.Body))
}

// Admit implements storageguard.Fence.Admit. Inside a write of this
// fence's Do on resource, an epoch that needs no raise is decided against
// that Do's hold, without a transaction of its own.
func (f *Fence) Admit(ctx context.Context, resource string, ep epoch.Epoch) error {
	if ok, err := txretry.Nested(ctx, f, resource, ep); ok {
		return err
	}
	return f.run(ctx, resource, ep, false, false, retryable, nil)
}

// Check implements storageguard.Fence.Check.
func (f *Fence) Check(ctx context.Context, resource string, ep epoch.Epoch) error {
	h, err := f.Highest(ctx, resource)
	if err != nil {
		return err
	}
	_, err = storageguard.Decide(resource, h, ep)
	return err
}

// Highest implements storageguard.Fence.Highest.
func (f *Fence) Highest(ctx context.Context, resource string) (epoch.Epoch, error) {
	if f.closed.Load() {
		return epoch.Epoch{}, storageguard.ErrClosed
	}
	if err := storageguard.ValidateResource(resource); err != nil {
		return epoch.Epoch{}, err
	}
	var h epoch.Epoch
	var term int64
	err := f.retry(ctx, func() error {
		return f.db.QueryRowContext(ctx, f.qSelectPlain, []byte(resource)).Scan(&h.Cluster, &term, &h.Leader)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return epoch.Epoch{}, nil
	}
	if err != nil {
		return epoch.Epoch{}, fmt.Errorf("sqlfence: read fence row: %w", err)
	}
	h.Term = uint64(term)
	return h, nil
}

// Close marks the fence closed and releases its prepared statements; it
// does not close the *sql.DB, which the caller owns. Transactions in
// progress finish (database/sql prepares a closed statement again for a
// transaction that still uses it).
func (f *Fence) Close() error {
	if f.closed.Swap(true) {
		return nil
	}
	if f.stLock != nil {
		f.stLock.Close()
		f.stSelect.Close()
		f.stDurable.Close()
	}
	return nil
}
