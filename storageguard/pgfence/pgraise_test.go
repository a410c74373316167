package pgfence_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/termfence/termfence/storageguard/internal/sqltest"
	"github.com/termfence/termfence/storageguard/pgfence"
)

// TestPgfenceRaiseDurable: on sessions whose synchronous_commit is off (a
// session or role default), every raise commits with it on — an Admit's,
// a Do's, a Tx's, and a Tx's whose fn lowers the setting itself — so a
// database crash cannot take back an acknowledged raise. The commit log (a
// deferred trigger on the fence table) reads the setting the commit used;
// a control write on the same sessions shows it off.
func TestPgfenceRaiseDurable(t *testing.T) {
	dsn := sqltest.PostgresDSN(t)
	log := sqltest.NewCommitLog(t, dsn)
	pool := openPgxPool(t, sqltest.WithParams(t, dsn, "synchronous_commit", "off"), nil)
	f := openPgfence(t, pool)
	ctx := context.Background()
	if err := f.Admit(ctx, "r", ep(3, "a")); err != nil {
		t.Fatal(err)
	}
	if err := f.Do(ctx, "r", ep(4, "a"), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := f.Tx(ctx, "r", ep(5, "a"), func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	err := f.TxWith(ctx, "r", ep(6, "a"), pgx.TxOptions{IsoLevel: pgx.Serializable}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = off")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "UPDATE termfence_fence SET term = term WHERE resource = 'r'"); err != nil {
		t.Fatal(err)
	}
	got := log.Commits(t)
	want := []sqltest.Commit{{Term: 3, Setting: "on"}, {Term: 4, Setting: "on"}, {Term: 5, Setting: "on"}, {Term: 6, Setting: "on"}, {Term: 6, Setting: "off"}}
	if len(got) != len(want) {
		t.Fatalf("commits of the fence row: %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("commits of the fence row: %v, want %v (the raises synchronous, the control as the session says)", got, want)
		}
	}
}

// openPgfenceApp opens a pgfence over sessions named app.
func openPgfenceApp(t *testing.T, dsn, app string) *pgfence.Fence {
	t.Helper()
	return openPgfence(t, openPgxPool(t, sqltest.WithParams(t, dsn, "application_name", app), nil))
}

// TestPgfenceRaiseTakesItsTurn: a raise waits for the older-epoch
// transactions that held the row before it asked, and those that begin
// after it wait for it (sqltest.RaiseTakesItsTurn).
func TestPgfenceRaiseTakesItsTurn(t *testing.T) {
	dsn := sqltest.PostgresDSN(t)
	apps := "pgturn_" + t.Name()
	older, raiser := openPgfenceApp(t, dsn, apps+"_old"), openPgfenceApp(t, dsn, apps+"_raise")
	sqltest.RaiseTakesItsTurn(t, dsn, older, raiser, apps+"_old", apps+"_raise")
}

// TestPgfenceRaiseUnderStream: a raise is served under a continuous stream
// of older-epoch transactions, and none that began after it asked gets in
// ahead of it (sqltest.RaiseUnderStream).
func TestPgfenceRaiseUnderStream(t *testing.T) {
	dsn := sqltest.PostgresDSN(t)
	apps := "pgstream_" + t.Name()
	older, raiser := openPgfenceApp(t, dsn, apps+"_old"), openPgfenceApp(t, dsn, apps+"_raise")
	r := sqltest.RaiseUnderStream(t, dsn, older, raiser, apps+"_raise", 4, 2*time.Minute)
	t.Logf("raise served after %v; %d older-epoch transactions before it asked, %d admitted while it waited", r.Wait, r.Before, r.During)
}

// TestPgfenceNestedDoWithRaisePending: a Do nested in a Do's write on the
// same resource neither deadlocks behind a pending raise nor escapes the
// fence (sqltest.NestedDoWithRaisePending).
func TestPgfenceNestedDoWithRaisePending(t *testing.T) {
	dsn := sqltest.PostgresDSN(t)
	apps := "pgnest_" + t.Name()
	f, raiser := openPgfenceApp(t, dsn, apps+"_f"), openPgfenceApp(t, dsn, apps+"_raise")
	sqltest.NestedDoWithRaisePending(t, dsn, f, raiser, apps+"_raise")
}
