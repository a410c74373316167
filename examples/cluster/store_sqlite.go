package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/httpfence"
	"github.com/termfence/termfence/storageguard/sqlfence"
)

// sqliteBackend keeps records in a SQLite table next to sqlfence's fence
// table, in one database file, so Fence.Tx can raise the fence and upsert
// the record in one transaction.
type sqliteBackend struct {
	db *sql.DB
	sf *sqlfence.Fence
	d  sqlfence.Dialect
	// delay, if set, runs inside each write's transaction after the
	// upsert (storeConfig.WriteDelay).
	delay func()
}

var _ backend = (*sqliteBackend)(nil)

const sqliteSchema = `CREATE TABLE IF NOT EXISTS cluster_records (
	resource TEXT PRIMARY KEY,
	value    TEXT NOT NULL,
	cluster  TEXT NOT NULL,
	term     INTEGER NOT NULL,
	leader   TEXT NOT NULL
)`

// openSQLite opens (or creates) the SQLite store at path: WAL journal,
// synchronous=FULL so an acknowledged write survives a crash, a busy
// timeout, and immediate transactions so concurrent writers queue instead of
// failing to upgrade their locks.
func openSQLite(ctx context.Context, path string) (*sqliteBackend, error) {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("store: open sqlite %s: %w", path, err)
	}
	if _, err := db.ExecContext(ctx, sqliteSchema); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: sqlite %s: create records table: %w", path, err)
	}
	f, err := sqlfence.Open(ctx, db, sqlfence.SQLite)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: sqlite %s: %w", path, err)
	}
	return &sqliteBackend{db: db, sf: f, d: sqlfence.SQLite}, nil
}

// rebind turns the ? placeholders of q into PostgreSQL's $1, $2, … for
// the Postgres dialect.
func (b *sqliteBackend) rebind(q string) string {
	if b.d != sqlfence.Postgres {
		return q
	}
	var sb strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			fmt.Fprintf(&sb, "$%d", n)
			continue
		}
		sb.WriteRune(c)
	}
	return sb.String()
}

const sqliteUpsert = `INSERT INTO cluster_records (resource, value, cluster, term, leader) VALUES (?, ?, ?, ?, ?)
	ON CONFLICT(resource) DO UPDATE SET value = excluded.value, cluster = excluded.cluster,
	term = excluded.term, leader = excluded.leader`

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func (b *sqliteBackend) upsert(ctx context.Context, db execer, rec record) error {
	_, err := db.ExecContext(ctx, b.rebind(sqliteUpsert), rec.Resource, rec.Value, rec.Epoch.Cluster, int64(rec.Epoch.Term), rec.Epoch.Leader)
	if err != nil {
		return fmt.Errorf("store: write %q: %w", rec.Resource, err)
	}
	return nil
}

func (b *sqliteBackend) put(ctx context.Context, rec record) error { return b.upsert(ctx, b.db, rec) }

func (b *sqliteBackend) get(ctx context.Context, resource string) (record, bool, error) {
	var (
		rec  record
		term int64
	)
	err := b.db.QueryRowContext(ctx, b.rebind(`SELECT resource, value, cluster, term, leader FROM cluster_records WHERE resource = ?`), resource).
		Scan(&rec.Resource, &rec.Value, &rec.Epoch.Cluster, &term, &rec.Epoch.Leader)
	if errors.Is(err, sql.ErrNoRows) {
		return record{}, false, nil
	}
	if err != nil {
		return record{}, false, fmt.Errorf("store: read %q: %w", resource, err)
	}
	rec.Epoch.Term = uint64(term)
	return rec, true, nil
}

func (b *sqliteBackend) resources(ctx context.Context) ([]string, error) {
	rows, err := b.db.QueryContext(ctx, `SELECT resource FROM cluster_records ORDER BY resource`)
	if err != nil {
		return nil, fmt.Errorf("store: list resources: %w", err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("store: list resources: %w", err)
		}
		names = append(names, n)
	}
	return names, rows.Err()
}

func (b *sqliteBackend) fence() storageguard.Fence { return b.sf }

// fencedWriter verifies the token with the Guard, then admits its epoch and
// upserts the record in one SQL transaction (storageguard.Tx over the
// Guard's fence, sqlfence.Fence.Tx): if the epoch is stale the transaction
// writes nothing; if it is newer, the raise and the record commit together.
// A missing token goes to the Guard too, so that its refusal is counted.
func (b *sqliteBackend) fencedWriter(g *storageguard.Guard) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := requestOf(r)
		tok, err := httpfence.TokenFrom(r)
		if errors.Is(err, storageguard.ErrUnauthenticated) {
			tok, err = "", nil
		}
		var ep epoch.Epoch
		if err == nil {
			err = storageguard.Tx(r.Context(), g, req.Resource, tok, func(tx *sql.Tx, admitted epoch.Epoch) error {
				ep = admitted
				if err := b.upsert(r.Context(), tx, record{Resource: req.Resource, Value: req.Value, Epoch: ep}); err != nil {
					return err
				}
				if b.delay != nil {
					b.delay()
				}
				return nil
			})
		}
		if err != nil {
			refuseWrite(w, req.Resource, err)
			return
		}
		accept(w, ep)
	})
}

func (b *sqliteBackend) close() error {
	return errors.Join(b.sf.Close(), b.db.Close())
}
