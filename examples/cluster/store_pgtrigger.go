package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/httpfence"
	"github.com/termfence/termfence/storageguard/pgfence"
	"github.com/termfence/termfence/storageguard/pgtrigger"
)

// The postgres-trigger backend keeps the records in a PostgreSQL table
// (-data is the DSN) that storageguard/pgtrigger guards: the fence lives in
// the database, so that every write path is checked, not only the store's
// HTTP API. The store's own writes present the request's token to the
// database (pgtrigger.Begin) and let the trigger decide; a batch job, a
// psql session or a second service writing the same table must present a
// current token too, or the database refuses the statement.
//
// The trigger fences the table as one resource: every record of the table
// is checked against one fence row (PGFenceResource), the same row pgfence
// writers of the table use. Reads, status and Check see that row whatever
// record they name.
//
// With Unfenced (the control experiment) the table is not guarded (an
// existing guard is uninstalled) and the store checks nothing, as with the
// other backends. With PGAPIOnly the table is not guarded either, but the
// store's API is fenced in Go (pgfence.Tx): the "fenced API, unfenced batch
// job" system of the README's "every write path must check".

// PGFenceResource is the fence resource of the postgres-trigger backend's
// table.
const PGFenceResource = "cluster_records"

// pgRecordsSchema is the records table, in the backend's schema.
const pgRecordsSchema = `CREATE TABLE IF NOT EXISTS cluster_records (
	resource TEXT PRIMARY KEY,
	value    TEXT NOT NULL,
	cluster  TEXT NOT NULL,
	term     BIGINT NOT NULL,
	leader   TEXT NOT NULL
)`

const pgUpsert = `INSERT INTO cluster_records (resource, value, cluster, term, leader) VALUES ($1, $2, $3, $4, $5)
	ON CONFLICT (resource) DO UPDATE SET value = excluded.value, cluster = excluded.cluster,
	term = excluded.term, leader = excluded.leader`

// pgTriggerBackend is the postgres-trigger backend.
type pgTriggerBackend struct {
	pool    *pgxpool.Pool
	pf      *pgfence.Fence
	schema  string
	guarded bool // the table carries pgtrigger's guard
	apiOnly bool // not guarded, the API fenced by pgfence.Tx
	dropAll bool // drop the schemas at close (a scenario's throwaway ones)
}

var _ backend = (*pgTriggerBackend)(nil)

// pgSchemaName is a fresh schema name for one scenario store.
func pgSchemaName() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return fmt.Sprintf("tfdemo_%x", b)
}

// openPGTrigger connects to cfg.Data, makes cfg.PGSchema (created if
// missing) the sessions' schema, creates the records table and guards it
// with pgtrigger under cfg.TokenKey (plain tokens allowed only when the
// store has no key, as its Verifier does), unless cfg.Unfenced or
// cfg.PGAPIOnly.
func openPGTrigger(ctx context.Context, cfg storeConfig) (*pgTriggerBackend, error) {
	if cfg.PGSchema == "" {
		return nil, errors.New("store: postgres-trigger: no schema")
	}
	pc, err := pgxpool.ParseConfig(cfg.Data)
	if err != nil {
		return nil, fmt.Errorf("store: postgres-trigger: -data is not a PostgreSQL DSN: %w", err)
	}
	pc.ConnConfig.RuntimeParams["search_path"] = cfg.PGSchema
	pc.ConnConfig.RuntimeParams["application_name"] = "termfence-store"
	pc.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("store: postgres-trigger: %w", err)
	}
	b := &pgTriggerBackend{pool: pool, schema: cfg.PGSchema, dropAll: cfg.PGDropSchema}
	fail := func(what string, err error) (*pgTriggerBackend, error) {
		b.close()
		return nil, fmt.Errorf("store: postgres-trigger: %s: %w", what, err)
	}
	if _, err := pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{cfg.PGSchema}.Sanitize()); err != nil {
		return fail("create schema", err)
	}
	if _, err := pool.Exec(ctx, pgRecordsSchema); err != nil {
		return fail("create records table", err)
	}
	if b.pf, err = pgfence.Open(ctx, pool); err != nil {
		return fail("fence", err)
	}
	switch {
	case cfg.Unfenced || cfg.PGAPIOnly:
		b.apiOnly = cfg.PGAPIOnly && !cfg.Unfenced
		if err := pgtrigger.Uninstall(ctx, pool, "cluster_records"); err != nil {
			return fail("uninstall the guard", err)
		}
	default:
		pcfg := pgtrigger.Config{
			Table: "cluster_records", Resource: PGFenceResource, Cluster: cfg.Cluster,
			Schema: cfg.PGSchema + "_private",
		}
		if len(cfg.TokenKey) > 0 {
			pcfg.HMACKey = cfg.TokenKey
		} else {
			pcfg.AllowPlain = true
		}
		if err := pgtrigger.Install(ctx, pool, pcfg); err != nil {
			return fail("install the guard", err)
		}
		b.guarded = true
	}
	return b, nil
}

// put writes without presenting a token: on the guarded table the database
// refuses it (the control experiment never guards its table).
func (b *pgTriggerBackend) put(ctx context.Context, rec record) error {
	if _, err := b.pool.Exec(ctx, pgUpsert, rec.Resource, rec.Value, rec.Epoch.Cluster, int64(rec.Epoch.Term), rec.Epoch.Leader); err != nil {
		return fmt.Errorf("store: write %q: %w", rec.Resource, err)
	}
	return nil
}

func (b *pgTriggerBackend) get(ctx context.Context, resource string) (record, bool, error) {
	var (
		rec  record
		term int64
	)
	err := b.pool.QueryRow(ctx, `SELECT resource, value, cluster, term, leader FROM cluster_records WHERE resource = $1`, resource).
		Scan(&rec.Resource, &rec.Value, &rec.Epoch.Cluster, &term, &rec.Epoch.Leader)
	if errors.Is(err, pgx.ErrNoRows) {
		return record{}, false, nil
	}
	if err != nil {
		return record{}, false, fmt.Errorf("store: read %q: %w", resource, err)
	}
	rec.Epoch.Term = uint64(term)
	return rec, true, nil
}

func (b *pgTriggerBackend) resources(ctx context.Context) ([]string, error) {
	rows, err := b.pool.Query(ctx, `SELECT resource FROM cluster_records ORDER BY resource`)
	if err != nil {
		return nil, fmt.Errorf("store: list resources: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("store: list resources: %w", err)
	}
	return names, nil
}

func (b *pgTriggerBackend) fence() storageguard.Fence { return tableFence{b.pf} }

// fencedWriter verifies the token with the Guard (a clear 401 before the
// database is asked), then, on the guarded table, writes in a transaction
// that presents the token and lets the trigger admit the epoch (a refusal
// is its SQLSTATE, turned into storageguard's errors by pgtrigger.Refusal);
// with PGAPIOnly, admits it with pgfence.Tx.
func (b *pgTriggerBackend) fencedWriter(g *storageguard.Guard) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := requestOf(r)
		tok, err := httpfence.TokenFrom(r)
		var ep epoch.Epoch
		if err == nil {
			ep, err = g.Verify(req.Resource, tok)
		}
		if err == nil {
			rec := record{Resource: req.Resource, Value: req.Value, Epoch: ep}
			if b.apiOnly {
				err = b.pf.Tx(r.Context(), PGFenceResource, ep, func(tx pgx.Tx) error {
					_, err := tx.Exec(r.Context(), pgUpsert, rec.Resource, rec.Value, rec.Epoch.Cluster, int64(rec.Epoch.Term), rec.Epoch.Leader)
					return err
				})
			} else {
				err = b.writeGuarded(r.Context(), tok, rec)
			}
		}
		if err != nil {
			refuseWrite(w, req.Resource, err)
			return
		}
		accept(w, ep)
	})
}

// writeGuarded upserts rec in a transaction that presents tok to the
// guard.
func (b *pgTriggerBackend) writeGuarded(ctx context.Context, tok string, rec record) error {
	tx, err := pgtrigger.Begin(ctx, b.pool, tok)
	if err != nil {
		return err
	}
	if _, err = tx.Exec(ctx, pgUpsert, rec.Resource, rec.Value, rec.Epoch.Cluster, int64(rec.Epoch.Term), rec.Epoch.Leader); err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
		if ref := pgtrigger.Refusal(err); ref != nil {
			return ref
		}
		return fmt.Errorf("store: write %q: %w", rec.Resource, err)
	}
	return nil
}

func (b *pgTriggerBackend) close() error {
	var err error
	if b.pf != nil {
		err = b.pf.Close()
	}
	if b.dropAll {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, s := range []string{b.schema, b.schema + "_private"} {
			if _, derr := b.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE"); derr != nil {
				err = errors.Join(err, derr)
			}
		}
	}
	b.pool.Close()
	return err
}

// tableFence is pgfence's fence with every resource mapped to the table's
// one fence row: the trigger fences the table as a whole.
type tableFence struct{ f *pgfence.Fence }

func (t tableFence) Do(ctx context.Context, _ string, ep epoch.Epoch, write func(ctx context.Context) error) error {
	return t.f.Do(ctx, PGFenceResource, ep, write)
}

func (t tableFence) Admit(ctx context.Context, _ string, ep epoch.Epoch) error {
	return t.f.Admit(ctx, PGFenceResource, ep)
}

func (t tableFence) Check(ctx context.Context, _ string, ep epoch.Epoch) error {
	return t.f.Check(ctx, PGFenceResource, ep)
}

func (t tableFence) Highest(ctx context.Context, _ string) (epoch.Epoch, error) {
	return t.f.Highest(ctx, PGFenceResource)
}

func (t tableFence) Close() error { return t.f.Close() }
