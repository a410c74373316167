package pgtrigger_test

import (
	"context"

	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/internal/sqltest"
	"github.com/termfence/termfence/storageguard/pgtrigger"
)

// guardFence drives writes through the guard as a storageguard.Fence, for
// the fences' shared checks: Do writes one row to the table guarding
// resource in a transaction that presents the epoch's token, runs write
// while that transaction (and so its hold on the fence row) is open, and
// commits; Admit is the same write without a function. Refusals are
// storageguard's errors (pgtrigger.Refusal).
type guardFence struct {
	t      testing.TB
	pool   *pgxpool.Pool
	tables map[string]string // resource -> guarded table
}

var _ storageguard.Fence = guardFence{}

func (g guardFence) Do(ctx context.Context, resource string, e epoch.Epoch, write func(context.Context) error) error {
	table, ok := g.tables[resource]
	if !ok {
		return fmt.Errorf("%w: no guarded table for %q", storageguard.ErrBadResource, resource)
	}
	tx, err := pgtrigger.Begin(ctx, g.pool, sign(g.t, key, e))
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (term) VALUES ($1)", int64(e.Term)); err != nil {
		return refusalOr(err)
	}
	if write != nil {
		if err := write(ctx); err != nil {
			return err
		}
	}
	return refusalOr(tx.Commit(context.WithoutCancel(ctx)))
}

// refusalOr returns the refusal err stands for, or err itself if it is no
// refusal (nil stays nil).
func refusalOr(err error) error {
	if r := pgtrigger.Refusal(err); r != nil {
		return r
	}
	return err
}

func (g guardFence) Admit(ctx context.Context, resource string, e epoch.Epoch) error {
	return g.Do(ctx, resource, e, nil)
}

func (g guardFence) Highest(ctx context.Context, resource string) (epoch.Epoch, error) {
	var h epoch.Epoch
	var term int64
	err := g.pool.QueryRow(ctx, "SELECT cluster, term, leader FROM termfence_fence WHERE resource = $1", []byte(resource)).Scan(&h.Cluster, &term, &h.Leader)
	h.Term = uint64(term)
	return h, err
}

func (g guardFence) Check(ctx context.Context, resource string, e epoch.Epoch) error {
	h, err := g.Highest(ctx, resource)
	if err != nil {
		return err
	}
	_, err = storageguard.Decide(resource, h, e)
	return err
}

func (g guardFence) Close() error { return nil }

// guardTables guards one table per resource (named like the resource) and
// returns a guardFence for each application name.
func guardTables(t *testing.T, d *db, resources []string, apps ...string) []guardFence {
	t.Helper()
	tables := map[string]string{}
	for _, r := range resources {
		d.exec(t, "CREATE TABLE "+r+" (n BIGSERIAL PRIMARY KEY, term BIGINT NOT NULL)")
		cfg := d.config(r)
		cfg.Resource = r
		d.install(t, cfg)
		tables[r] = r
	}
	var out []guardFence
	for _, app := range apps {
		out = append(out, guardFence{t: t, pool: openPool(t, sqltest.WithParams(t, d.dsn, "application_name", app)), tables: tables})
	}
	return out
}

// TestGuardRaiseDurable: a raise through the guard commits with
// synchronous_commit on, whatever the writer's session says: off as the
// session's default, or set off in the transaction before the write. The
// commit log (a deferred trigger on the fence table, there before Install
// approved the table's triggers) reads the setting each commit used; a
// control write on the same sessions, no raise, shows it off.
func TestGuardRaiseDurable(t *testing.T) {
	d := newDB(t)
	log := sqltest.NewCommitLog(t, d.dsn)
	d.exec(t, "CREATE TABLE ledger (n BIGSERIAL PRIMARY KEY, term BIGINT NOT NULL)")
	d.install(t, d.config("ledger"))
	off := openPool(t, sqltest.WithParams(t, d.dsn, "synchronous_commit", "off"))
	ctx := context.Background()
	write := func(e epoch.Epoch, pre string) {
		t.Helper()
		tx, err := pgtrigger.Begin(ctx, off, sign(t, key, e))
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if pre != "" {
			if _, err := tx.Exec(ctx, pre); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := tx.Exec(ctx, "INSERT INTO ledger (term) VALUES ($1)", int64(e.Term)); err != nil {
			t.Fatalf("write under %v: %v", e, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	write(ep(3, "a"), "")                                   // the resource's first epoch
	write(ep(3, "a"), "")                                   // no raise: nothing logged
	write(ep(4, "a"), "SET LOCAL synchronous_commit = off") // a raise
	if _, err := off.Exec(ctx, "UPDATE termfence_fence SET term = term WHERE resource = 'ledger'"); err != nil {
		t.Fatal(err)
	}
	got := log.Commits(t)
	want := []sqltest.Commit{{Term: 3, Setting: "on"}, {Term: 4, Setting: "on"}, {Term: 4, Setting: "off"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("commits of the fence row: %v, want %v (the raises synchronous, the control as the session says)", got, want)
	}
}

// TestGuardRaiseTakesItsTurn: a raise through the guard waits for the
// older-epoch writers that held the row before it asked, and writers that
// begin after it wait for it and are then refused
// (sqltest.RaiseTakesItsTurn).
func TestGuardRaiseTakesItsTurn(t *testing.T) {
	d := newDB(t)
	f := guardTables(t, d, []string{"turn"}, d.private+"_old", d.private+"_raise")
	sqltest.RaiseTakesItsTurn(t, d.dsn, f[0], f[1], d.private+"_old", d.private+"_raise")
}

// TestGuardRaiseUnderStream: a raise through the guard is served under a
// continuous stream of older-epoch writers, and none that began after it
// asked gets in ahead of it (sqltest.RaiseUnderStream).
func TestGuardRaiseUnderStream(t *testing.T) {
	d := newDB(t)
	f := guardTables(t, d, []string{"stream"}, d.private+"_old", d.private+"_raise")
	r := sqltest.RaiseUnderStream(t, d.dsn, f[0], f[1], d.private+"_raise", 8, 2*time.Minute)
	t.Logf("raise served after %v; %d older-epoch transactions before it asked, %d admitted while it waited", r.Wait, r.Before, r.During)
}
