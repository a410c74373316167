package pgfence

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/internal/pgproto"
	"github.com/termfence/termfence/storageguard/internal/txretry"
)

// The table is sqlfence's PostgreSQL table: both fences may guard the same
// resources at once.
const (
	qCreate = "CREATE TABLE IF NOT EXISTS termfence_fence (resource BYTEA PRIMARY KEY, cluster TEXT NOT NULL, term BIGINT NOT NULL, leader TEXT NOT NULL)"
	qInsert = "INSERT INTO termfence_fence (resource, cluster, term, leader) VALUES ($1, $2, $3, $4) ON CONFLICT (resource) DO NOTHING"
	qSelect = "SELECT cluster, term, leader FROM termfence_fence WHERE resource = $1"
)

// The statements that lock the fence row take the resource's advisory
// lock first, in the same statement (pgproto: the turn that keeps a stream
// of same-epoch transactions from starving a raise); its column is always
// false.
var (
	qSelectShared = "SELECT cluster, term, leader, " + pgproto.LockShared("termfence_fence") +
		" FROM termfence_fence WHERE resource = $1 FOR SHARE"
	// qSelectHold is a Do's check: the session idles in its transaction
	// while the write runs outside it, so the transaction turns the
	// session's idle-in-transaction timeout off (SET LOCAL) in the same
	// statement; the server would otherwise end the session, and the lock,
	// under the write.
	qSelectHold = "SELECT cluster, term, leader, " + pgproto.LockShared("termfence_fence") +
		", CASE WHEN current_setting('idle_in_transaction_session_timeout') <> '0' THEN set_config('idle_in_transaction_session_timeout', '0', true) END FROM termfence_fence WHERE resource = $1 FOR SHARE"
	// qSelectUpdate is a raise's lock: it also makes the transaction commit
	// with synchronous_commit on, whatever the session says
	// (pgproto.Durable).
	qSelectUpdate = "SELECT cluster, term, leader, " + pgproto.LockExclusive("termfence_fence") + ", " + pgproto.Durable +
		" FROM termfence_fence WHERE resource = $1 FOR UPDATE"
	// qDurable makes a raise's commit synchronous again after Tx's fn,
	// which may have lowered synchronous_commit.
	qDurable = "SELECT " + pgproto.Durable
)

const (
	qUpdate = "UPDATE termfence_fence SET cluster = $1, term = $2, leader = $3 WHERE resource = $4"
	// qPresent presents the token of Options.Signer for the rest of the
	// transaction (pgtrigger's setting).
	qPresent = "SELECT pg_catalog.set_config('termfence.token', $1, true)"
)

// maxAttempts bounds the attempts of a transaction that fails with a
// serialization failure or a deadlock.
const maxAttempts = 10

// endTimeout bounds the end (commit or rollback) of a transaction once the
// fence is held: the caller's context no longer applies there, and a link
// cut mid-transaction must not hang the call for the kernel's TCP timeout.
const endTimeout = 5 * time.Second

// Fence is a durable storageguard.Fence in a PostgreSQL table, used through
// a pgx connection pool. Its Tx runs a function in the transaction that
// checks (and, if newer, raises) the epoch, and the check travels with
// BEGIN: a same-epoch Tx costs the round trips of the caller's own
// statements plus BEGIN and COMMIT, as the same transaction unguarded does.
//
// Transactions under the current epoch hold the fence row FOR SHARE and run
// concurrently; a raise holds it FOR UPDATE, so it waits for them, and
// afterwards they are refused.
type Fence struct {
	pool   *pgxpool.Pool
	signer epoch.Signer
	closed atomic.Bool
}

// Options are a Fence's settings; the zero value is Open's.
type Options struct {
	// Signer, if set, signs the epoch of each transaction the fence runs,
	// and the transaction presents the token (the setting termfence.token,
	// transaction-local) before it touches the fence row, in the same
	// round trip as BEGIN. A role that does not own termfence_fence needs
	// it to raise a row once storageguard/pgtrigger guards the table: the
	// row must then be the epoch of the transaction's verified token
	// (where the cluster's HMAC key is in the database). It also presents
	// the token to the guard for the writes Tx's function makes to guarded
	// tables, so they need no pgtrigger.Present. Give the leader's signer
	// (an HMAC codec of the cluster's key, the one pgtrigger.Install
	// stored).
	Signer epoch.Signer
}

var _ storageguard.Fence = (*Fence)(nil)

// Open returns a fence over pool, creating its table (termfence_fence, in
// the first schema of the connections' search_path) if missing. The caller
// keeps ownership of pool: Close does not close it.
func Open(ctx context.Context, pool *pgxpool.Pool) (*Fence, error) {
	return OpenWith(ctx, pool, Options{})
}

// OpenWith is Open with options.
func OpenWith(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Fence, error) {
	if pool == nil {
		return nil, errors.New("pgfence: Open: nil pool")
	}
	f := &Fence{pool: pool, signer: opts.Signer}
	err := retry(ctx, func() error {
		_, err := pool.Exec(ctx, qCreate)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgfence: create fence table: %w", err)
	}
	return f, nil
}

// attempt runs one transaction: begin and lock and read the fence row in
// one round trip (FOR SHARE, or, exclusive, create the row if missing and
// lock it FOR UPDATE), decide, raise if exclusive, run fn, commit.
//
// ctx bounds getting in (the batch that waits for the lock, the raise),
// never the hold: the commit and the rollback run under a context that the
// caller's cancellation does not reach, bounded by endTimeout. hold marks a
// Do's transaction (qSelectHold).
func (f *Fence) attempt(ctx context.Context, resource string, ep epoch.Epoch, exclusive, hold bool, opts pgx.TxOptions, fn func(pgx.Tx) error) (err error) {
	key := []byte(resource)
	var b pgx.Batch
	b.BeginTx(opts)
	signed := f.signer != nil
	if signed {
		tok, err := f.signer.Sign(ep)
		if err != nil {
			return fmt.Errorf("pgfence: sign %v: %w", ep, err)
		}
		b.Queue(qPresent, tok)
	}
	if exclusive {
		// The first epoch of a resource is always a raise (Decide on a
		// zero highest): inserting it is that raise, committed with the
		// rest.
		b.Queue(qInsert, key, ep.Cluster, int64(ep.Term), ep.Leader)
		b.Queue(qSelectUpdate, key)
	} else if hold {
		b.Queue(qSelectHold, key)
	} else {
		b.Queue(qSelectShared, key)
	}
	br := f.pool.SendBatch(ctx, &b)
	tx := br.Tx()
	committed := false
	defer func() {
		if !committed {
			// Also on a panic in fn or after ctx ended: never leave the row
			// locked or the pool's connection held. Bounded: a connection
			// that cannot roll back in time is closed by pgx and dropped
			// by the pool, and the server releases the locks with it.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
			defer cancel()
			tx.Rollback(rctx)
		}
	}()
	h, err := readBatch(br, signed, exclusive, hold)
	if err != nil {
		return err
	}
	d, err := storageguard.Decide(resource, h, ep)
	if err != nil {
		return err
	}
	if d.Raise {
		if !exclusive {
			// Never upgrade FOR SHARE to FOR UPDATE in one transaction:
			// two raisers doing so deadlock. Start over exclusively.
			return txretry.ErrNeedRaise
		}
		if _, err := tx.Exec(ctx, qUpdate, ep.Cluster, int64(ep.Term), ep.Leader, key); err != nil {
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
		if exclusive {
			if _, err := tx.Exec(ctx, qDurable); err != nil {
				return err
			}
		}
	}
	committed = true
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
	defer cancel()
	return tx.Commit(cctx)
}

// readBatch reads an attempt's batch: BEGIN, the token if signed, the
// INSERT if exclusive, and the fence row (the zero epoch if there is none).
func readBatch(br pgx.BatchResults, signed, exclusive, hold bool) (epoch.Epoch, error) {
	defer br.Close()
	if _, err := br.Exec(); err != nil { // BEGIN
		return epoch.Epoch{}, err
	}
	if signed {
		if _, err := br.Exec(); err != nil {
			return epoch.Epoch{}, err
		}
	}
	if exclusive {
		if _, err := br.Exec(); err != nil {
			return epoch.Epoch{}, err
		}
	}
	var h epoch.Epoch
	var term int64
	var locked bool
	var setting *string
	dst := []any{&h.Cluster, &term, &h.Leader, &locked, &setting}
	if !hold && !exclusive {
		dst = dst[:4]
	}
	switch err := br.QueryRow().Scan(dst...); {
	case errors.Is(err, pgx.ErrNoRows):
		h = epoch.Epoch{}
	case err != nil:
		return epoch.Epoch{}, err
	default:
		h.Term = uint64(term)
	}
	return h, br.Close()
}

// run drives attempts (txretry.Run): exclusive when a raise is needed, the
// raise committed alone first unless raiseInTx, serialization failures and
// deadlocks retried with backoff.
func (f *Fence) run(ctx context.Context, resource string, ep epoch.Epoch, raiseInTx, hold bool, retry func(error) bool, opts pgx.TxOptions, fn func(pgx.Tx) error) error {
	if f.closed.Load() {
		return storageguard.ErrClosed
	}
	if _, err := storageguard.Decide(resource, epoch.Epoch{}, ep); err != nil {
		return err
	}
	if ep.Term > math.MaxInt64 {
		return fmt.Errorf("pgfence: %w: term %d does not fit the fence's BIGINT", epoch.ErrMalformed, ep.Term)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	attempt := func(exclusive, withFn bool) error {
		if !withFn {
			return f.attempt(ctx, resource, ep, true, false, pgx.TxOptions{}, nil)
		}
		return f.attempt(ctx, resource, ep, exclusive, hold, opts, fn)
	}
	return txretry.Run(ctx, attempt, raiseInTx, retry, maxAttempts, "pgfence:")
}

// Tx runs fn in one transaction with the check of ep for resource and, if
// ep is newer than the highest, its raise; BEGIN and the check share one
// round trip. If fn returns an error, or the commit fails, the transaction
// rolls back, raise included. fn may run more than once: a transaction that
// fails with a serialization failure or a deadlock is retried (a bounded
// number of times, with backoff), so fn must have no effects outside tx.
// Refusals (storageguard.ErrStale, ErrConflict, ErrForeignCluster, …) are
// returned without calling fn.
//
// Under READ COMMITTED (PostgreSQL's default) a transaction waiting behind
// a raise sees the raised row and is refused; stricter levels fail it with
// a serialization error, which is retried and then refused.
//
// ctx bounds the wait to get in (the lock, the check, the raise), never the
// hold: the commit runs whatever happens to ctx once fn returned nil. To
// cancel the transaction, run fn's statements with ctx: they fail once ctx
// ends, fn returns their error, and everything rolls back.
func (f *Fence) Tx(ctx context.Context, resource string, ep epoch.Epoch, fn func(pgx.Tx) error) error {
	return f.TxWith(ctx, resource, ep, pgx.TxOptions{}, fn)
}

// ErrReadOnly is returned by TxWith for read-only options: the check locks
// the fence row, which PostgreSQL refuses in a read-only transaction (and a
// transaction that writes nothing needs no fence).
var ErrReadOnly = errors.New("pgfence: a read-only transaction cannot hold the fence")

// TxWith is Tx with the transaction's options (isolation level,
// deferrable mode, …); read-only access fails with ErrReadOnly.
func (f *Fence) TxWith(ctx context.Context, resource string, ep epoch.Epoch, opts pgx.TxOptions, fn func(pgx.Tx) error) error {
	if fn == nil {
		return errors.New("pgfence: Tx: nil fn")
	}
	if opts.AccessMode == pgx.ReadOnly {
		return ErrReadOnly
	}
	return f.run(ctx, resource, ep, true, false, retryable, opts, fn)
}

// Do implements storageguard.Fence.Do. A raise is committed in a
// transaction of its own first, so it is durable before write runs; write
// then runs while a second transaction holds the fence row FOR SHARE, so no
// newer epoch is admitted until write returns. write gets ctx, not the
// transaction: to write to the same database in the same transaction as
// the check, use Tx. write runs at most once.
//
// ctx bounds the wait to get in, never the hold: once write runs, the
// transaction lives until write returns whatever happens to ctx, and it
// turns the session's idle_in_transaction_session_timeout off.
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
	h := txretry.NewHeldHold[pgx.Tx](ctx, f, resource, ep, write)
	return h.Result(f.run(ctx, resource, ep, false, true, h.Retryable(retryable), pgx.TxOptions{}, h.Body))
}

// Admit implements storageguard.Fence.Admit. Inside a write of this
// fence's Do on resource, an epoch that needs no raise is decided against
// that Do's hold, without a transaction of its own.
func (f *Fence) Admit(ctx context.Context, resource string, ep epoch.Epoch) error {
	if ok, err := txretry.Nested(ctx, f, resource, ep); ok {
		return err
	}
	return f.run(ctx, resource, ep, false, false, retryable, pgx.TxOptions{}, nil)
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
	err := retry(ctx, func() error {
		return f.pool.QueryRow(ctx, qSelect, []byte(resource)).Scan(&h.Cluster, &term, &h.Leader)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return epoch.Epoch{}, nil
	}
	if err != nil {
		return epoch.Epoch{}, fmt.Errorf("pgfence: read fence row: %w", err)
	}
	h.Term = uint64(term)
	return h, nil
}

// Close marks the fence closed: later calls return storageguard.ErrClosed.
// It does not close the pool, which the caller owns; transactions in
// progress finish.
func (f *Fence) Close() error {
	f.closed.Store(true)
	return nil
}

// retry runs op, retrying serialization failures and deadlocks.
func retry(ctx context.Context, op func() error) error {
	return txretry.Retry(ctx, op, retryable, maxAttempts)
}

// retryable reports a serialization failure (SQLSTATE 40001) or a deadlock
// (40P01).
func retryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "40001", "40P01":
			return true
		}
	}
	return false
}
