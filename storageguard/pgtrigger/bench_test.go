package pgtrigger_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/termfence/termfence/storageguard/pgfence"
	"github.com/termfence/termfence/storageguard/pgtrigger"
)

// benchSetup is one connection (so the figures are round-trip latency, as
// in pgfence's benchmark), two identical one-row tables, the one guarded,
// and the ways to run the same one-row UPDATE in a transaction.
type benchSetup struct {
	variants []benchVariant
}

type benchVariant struct {
	name string
	run  func(ctx context.Context) error
}

func newBench(b *testing.B) benchSetup {
	b.Helper()
	ctx := context.Background()
	d := newDB(b)
	cfg, err := pgxpool.ParseConfig(d.dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	d.exec(b, `CREATE TABLE bench_plain (id int PRIMARY KEY, n bigint NOT NULL);
CREATE TABLE bench_guarded (id int PRIMARY KEY, n bigint NOT NULL);
INSERT INTO bench_plain VALUES (1, 0);
INSERT INTO bench_guarded VALUES (1, 0)`)
	d.install(b, d.config("bench_guarded"))
	// Where the guard's time goes: the same UPDATE under a PL/pgSQL
	// statement trigger that does nothing, and under one that only takes
	// the fence row FOR SHARE as the guard does.
	d.exec(b, `CREATE TABLE bench_noop (id int PRIMARY KEY, n bigint NOT NULL);
CREATE TABLE bench_share (id int PRIMARY KEY, n bigint NOT NULL);
INSERT INTO bench_noop VALUES (1, 0);
INSERT INTO bench_share VALUES (1, 0);
CREATE FUNCTION bench_noop() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$;
CREATE FUNCTION bench_share() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM 1 FROM termfence_fence f WHERE f.resource = convert_to('ledger', 'UTF8') FOR SHARE;
  RETURN NULL;
END$$;
CREATE TRIGGER noop BEFORE UPDATE ON bench_noop FOR EACH STATEMENT EXECUTE FUNCTION bench_noop();
CREATE TRIGGER share BEFORE UPDATE ON bench_share FOR EACH STATEMENT EXECUTE FUNCTION bench_share()`)
	f, err := pgfence.Open(ctx, pool)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	e := ep(7, "node-a")
	tok := sign(b, key, e)
	if err := f.Admit(ctx, "ledger", e); err != nil {
		b.Fatal(err)
	}
	const plain = "UPDATE bench_plain SET n = n + 1 WHERE id = 1"
	const guardedUpdate = "UPDATE bench_guarded SET n = n + 1 WHERE id = 1"
	inTx := func(ctx context.Context, tx pgx.Tx, stmt string) error {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			tx.Rollback(ctx)
			return err
		}
		return tx.Commit(ctx)
	}
	return benchSetup{variants: []benchVariant{
		// BEGIN, UPDATE, COMMIT: three round trips.
		{"unguarded", func(ctx context.Context) error {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			return inTx(ctx, tx, plain)
		}},
		// Three round trips, a statement trigger that does nothing.
		{"noop-trigger", func(ctx context.Context) error {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			return inTx(ctx, tx, "UPDATE bench_noop SET n = n + 1 WHERE id = 1")
		}},
		// Three round trips, a statement trigger that only takes the fence
		// row FOR SHARE.
		{"share-lock-trigger", func(ctx context.Context) error {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			return inTx(ctx, tx, "UPDATE bench_share SET n = n + 1 WHERE id = 1")
		}},
		// The same three round trips: the token rides in BEGIN's message.
		{"trigger", func(ctx context.Context) error {
			tx, err := pgtrigger.Begin(ctx, pool, tok)
			if err != nil {
				return err
			}
			return inTx(ctx, tx, guardedUpdate)
		}},
		// As psql sends it line by line: BEGIN, SET LOCAL, UPDATE,
		// COMMIT, four round trips.
		{"trigger-set-local-alone", func(ctx context.Context) error {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "SET LOCAL termfence.token = '"+tok+"'"); err != nil {
				tx.Rollback(ctx)
				return err
			}
			return inTx(ctx, tx, guardedUpdate)
		}},
		// pgfence's check rides with BEGIN: three round trips.
		{"pgfence.Tx", func(ctx context.Context) error {
			return f.Tx(ctx, "ledger", e, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, plain)
				return err
			})
		}},
		// A Go writer through pgfence on the guarded table presents the
		// token too: four round trips, both checks.
		{"pgfence.Tx+trigger", func(ctx context.Context) error {
			return f.Tx(ctx, "ledger", e, func(tx pgx.Tx) error {
				if err := pgtrigger.Present(ctx, tx, tok); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, guardedUpdate)
				return err
			})
		}},
	}}
}

// BenchmarkTrigger: a one-row UPDATE in a transaction, unguarded, guarded
// by the trigger, and through pgfence's Tx, each as a sub-benchmark.
func BenchmarkTrigger(b *testing.B) {
	s := newBench(b)
	for _, v := range s.variants {
		b.Run(v.name, func(b *testing.B) {
			ctx := context.Background()
			for b.Loop() {
				if err := v.run(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTriggerInterleaved runs the variants of BenchmarkTrigger in
// turn within one loop, so that load that comes and goes on a shared
// machine hits them alike, and reports each one's median latency (µs/x)
// and the ratio of its median to the unguarded transaction's
// (x/unguarded). Medians, because a burst of other work on two shared
// cores moves a mean by more than the difference being measured.
func BenchmarkTriggerInterleaved(b *testing.B) {
	s := newBench(b)
	ctx := context.Background()
	spent := make([][]time.Duration, len(s.variants))
	for b.Loop() {
		for i, v := range s.variants {
			start := time.Now()
			if err := v.run(ctx); err != nil {
				b.Fatal(err)
			}
			spent[i] = append(spent[i], time.Since(start))
		}
	}
	median := func(d []time.Duration) time.Duration {
		d = slices.Clone(d)
		slices.Sort(d)
		return d[len(d)/2]
	}
	base := median(spent[0])
	for i, v := range s.variants {
		m := median(spent[i])
		b.ReportMetric(float64(m.Nanoseconds())/1e3, "µs/"+v.name)
		if i > 0 {
			b.ReportMetric(float64(m)/float64(base), v.name+"/unguarded")
		}
	}
}
