package pgfence_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/fencetest"
	"github.com/termfence/termfence/storageguard/internal/sqltest"
	"github.com/termfence/termfence/storageguard/pgfence"
	"github.com/termfence/termfence/storageguard/sqlfence"
)

func ep(term uint64, leader string) epoch.Epoch {
	return epoch.Epoch{Cluster: "payments", Term: term, Leader: leader}
}

// openSQL opens sqlfence's PostgreSQL fence over db, closed when the test
// ends.
func openSQL(t testing.TB, db *sql.DB) *sqlfence.Fence {
	t.Helper()
	f, err := sqlfence.Open(context.Background(), db, sqlfence.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// These tests run pgfence through the fencetest suite; they need
// TERMFENCE_POSTGRES_DSN (sqltest.PostgresEnv), like sqlfence's PostgreSQL
// tests.

// roundTrips counts what a pool sends: batches and single queries (each
// one round trip).
type roundTrips struct{ batches, queries atomic.Int64 }

func (c *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.queries.Add(1)
	return ctx
}
func (c *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.batches.Add(1)
	return ctx
}
func (c *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func openPgxPool(t testing.TB, dsn string, tracer *roundTrips) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if tracer != nil {
		cfg.ConnConfig.Tracer = tracer
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func openPgfence(t testing.TB, pool *pgxpool.Pool) *pgfence.Fence {
	t.Helper()
	f, err := pgfence.Open(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestPgfence(t *testing.T) {
	var dsn string
	fencetest.Run(t, fencetest.Kind{
		Open: func(t *testing.T) storageguard.Fence {
			dsn = sqltest.PostgresDSN(t)
			return openPgfence(t, openPgxPool(t, dsn, nil))
		},
		Reopen: func(t *testing.T) storageguard.Fence {
			return openPgfence(t, openPgxPool(t, dsn, nil))
		},
		Goroutines: 8, Ops: 60,
		Waiting: func(t *testing.T) int { return sqltest.PostgresLockWaiters(t, dsn) },
	})
	t.Run("Tx", func(t *testing.T) { testPgfenceTx(t, openPgxPool(t, sqltest.PostgresDSN(t), nil)) })
}

// testPgfenceTx runs fencetest.TxAtomic over pgfence's Tx, then checks TxWith's
// options.
func testPgfenceTx(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	f := openPgfence(t, pool)
	fencetest.TxAtomic(t, f, fencetest.TxAPI{
		Placeholder: "$1",
		Exec:        func(stmt string) error { _, err := pool.Exec(ctx, stmt); return err },
		Read: func() (c string, err error) {
			return c, pool.QueryRow(ctx, "SELECT content FROM files WHERE id = 'f'").Scan(&c)
		},
		Tx: func(e epoch.Epoch, then error, stmt string, args ...any) error {
			return f.Tx(ctx, "files/f", e, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, stmt, args...); err != nil {
					return err
				}
				return then
			})
		},
		NilFn: func(e epoch.Epoch) error { return f.Tx(ctx, "files/f", e, nil) },
	})
	e34 := ep(34, "node-b") // testTx leaves the fence at 34
	// Options pass through (a serializable transaction works); read-only
	// ones are refused before anything is sent.
	ser := pgx.TxOptions{IsoLevel: pgx.Serializable}
	if err := f.TxWith(ctx, "files/f", e34, ser, func(tx pgx.Tx) error {
		var iso string
		if err := tx.QueryRow(ctx, "SHOW transaction_isolation").Scan(&iso); err != nil {
			return err
		}
		if iso != "serializable" {
			return errors.New("isolation " + iso)
		}
		return nil
	}); err != nil {
		t.Fatalf("serializable Tx = %v", err)
	}
	ro := pgx.TxOptions{AccessMode: pgx.ReadOnly}
	if err := f.TxWith(ctx, "files/f", ep(36, "node-d"), ro, func(pgx.Tx) error { return nil }); !errors.Is(err, pgfence.ErrReadOnly) {
		t.Fatalf("read-only Tx = %v, want ErrReadOnly", err)
	}
	if h, _ := f.Highest(ctx, "files/f"); h != e34 {
		t.Fatalf("Highest = %v after a read-only Tx, want %v", h, e34)
	}
	if _, err := pgfence.Open(ctx, nil); err == nil {
		t.Fatal("Open(nil pool) succeeded")
	}
}

// TestPgfenceCheckRidesWithBegin: a same-epoch Tx with one statement sends
// one batch (BEGIN and the check) and two single queries (the statement and
// COMMIT) — the round trips of the same transaction unguarded.
func TestPgfenceCheckRidesWithBegin(t *testing.T) {
	ctx := context.Background()
	rt := &roundTrips{}
	pool := openPgxPool(t, sqltest.PostgresDSN(t), rt)
	f := openPgfence(t, pool)
	e := ep(7, "node-a")
	if err := f.Admit(ctx, "r", e); err != nil {
		t.Fatal(err)
	}
	rt.batches.Store(0)
	rt.queries.Store(0)
	err := f.Tx(ctx, "r", e, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT 1")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if b, q := rt.batches.Load(), rt.queries.Load(); b != 1 || q != 2 {
		t.Fatalf("same-epoch Tx sent %d batches and %d queries, want 1 and 2", b, q)
	}
}

// TestPgfenceSameEpochTxConcurrent: two transactions under one epoch hold
// the fence row FOR SHARE together.
func TestPgfenceSameEpochTxConcurrent(t *testing.T) {
	f := openPgfence(t, openPgxPool(t, sqltest.PostgresDSN(t), nil))
	fencetest.TxSameEpochConcurrent(t, f, func(ctx context.Context, e epoch.Epoch, body func() error) error {
		return f.Tx(ctx, "r", e, func(pgx.Tx) error { return body() })
	})
}

// pgTxFence presents pgfence's Tx as a Fence so that the suite's
// random-epoch test runs over Tx (raise inside the transaction).
type pgTxFence struct{ *pgfence.Fence }

func (f pgTxFence) Do(ctx context.Context, resource string, e epoch.Epoch, write func(context.Context) error) error {
	return f.Tx(ctx, resource, e, func(pgx.Tx) error { return write(ctx) })
}

func TestPgfenceTxConcurrentRandomEpochs(t *testing.T) {
	fencetest.ConcurrentRandom(t, 8, 60, pgTxFence{openPgfence(t, openPgxPool(t, sqltest.PostgresDSN(t), nil))})
}

// TestPgfenceSharesSQLTable: pgfence and sqlfence's PostgreSQL dialect
// guard the same rows, so processes may mix them.
func TestPgfenceSharesSQLTable(t *testing.T) {
	dsn := sqltest.PostgresDSN(t)
	a := openSQL(t, sqltest.OpenPostgres(t, dsn))
	b := openPgfence(t, openPgxPool(t, dsn, nil))
	fencetest.TwoHandles(t, a, b)
}

// BenchmarkPgfence puts the PostgreSQL fences beside their baselines in one
// run: the same one-UPDATE transaction unguarded and guarded by sqlfence's
// Tx through database/sql (sqltest.BenchTx: database/sql sends BEGIN alone,
// so the check costs a round trip of its own), then unguarded and guarded by
// pgfence's Tx through pgx (the check rides with BEGIN). One connection
// each, so the figures are round-trip latency.
func BenchmarkPgfence(b *testing.B) {
	ctx := context.Background()
	dsn := sqltest.PostgresDSN(b)
	db := sqltest.OpenPostgres(b, dsn)
	db.SetMaxOpenConns(1)
	sf, err := sqlfence.Open(ctx, db, sqlfence.Postgres)
	if err != nil {
		b.Fatal(err)
	}
	defer sf.Close()
	e := ep(7, "node-a")
	if err := sf.Admit(ctx, "files/f", e); err != nil {
		b.Fatal(err)
	}
	sqltest.BenchTx(b, db, "$1", func(ctx context.Context, fn func(*sql.Tx) error) error {
		return sf.Tx(ctx, "files/f", e, fn)
	})
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	f := openPgfence(b, pool)
	const update = "UPDATE bench_files SET n = n + 1 WHERE id = $1" // BenchTx's table
	if err := f.Admit(ctx, "files/f", e); err != nil {
		b.Fatal(err)
	}
	b.Run("baseline-pgx-tx-update", func(b *testing.B) {
		for b.Loop() {
			tx, err := pool.Begin(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tx.Exec(ctx, update, "f"); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pgfence.Tx-update", func(b *testing.B) {
		for b.Loop() {
			err := f.Tx(ctx, "files/f", e, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, update, "f")
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestPgfenceSessionKilledUnderDo: the session holding a Do's lock is
// terminated mid-write; Do reports storageguard.ErrFenceLost.
func TestPgfenceSessionKilledUnderDo(t *testing.T) {
	dsn := sqltest.PostgresDSN(t)
	app := "pgfence-" + t.Name()
	f := openPgfence(t, openPgxPool(t, sqltest.WithParams(t, dsn, "application_name", app), nil))
	sqltest.FenceLost(t, f, func(ctx context.Context) (int, error) { return sqltest.Terminate(ctx, dsn, app) })
}

// TestPgfenceIdleTimeoutUnderDo: a server-side
// idle_in_transaction_session_timeout shorter than the write does not end
// the session that holds a Do's lock.
func TestPgfenceIdleTimeoutUnderDo(t *testing.T) {
	plain := sqltest.PostgresDSN(t)
	dsn := sqltest.WithParams(t, plain, "idle_in_transaction_session_timeout", "100")
	sqltest.IdleTimeoutHolds(t, openPgfence(t, openPgxPool(t, dsn, nil)), openPgfence(t, openPgxPool(t, plain, nil)), 100*time.Millisecond)
}

// TestPgfenceTxCancelHolds: Tx keeps its transaction, and with it the
// fence, while fn runs, whatever happens to the caller's context.
func TestPgfenceTxCancelHolds(t *testing.T) {
	f := openPgfence(t, openPgxPool(t, sqltest.PostgresDSN(t), nil))
	fencetest.CancelHolds(t, f, func(ctx context.Context, e epoch.Epoch, body func() error) error {
		return f.Tx(ctx, "r", e, func(pgx.Tx) error { return body() })
	})
}
