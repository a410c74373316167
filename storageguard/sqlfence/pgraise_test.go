package sqlfence_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/termfence/termfence/storageguard/internal/sqltest"
	"github.com/termfence/termfence/storageguard/sqlfence"
)

// TestPostgresRaiseDurable: on sessions whose synchronous_commit is off (a
// session or role default), every raise commits with it on — an Admit's,
// a Do's, a Tx's, and a Tx's whose fn lowers the setting itself — so a
// database crash cannot take back an acknowledged raise. The commit log
// (a deferred trigger on the fence table) reads the setting the commit
// used; a control write on the same sessions shows it off.
func TestPostgresRaiseDurable(t *testing.T) {
	dsn := sqltest.PostgresDSN(t)
	log := sqltest.NewCommitLog(t, dsn)
	db := sqltest.OpenPostgres(t, sqltest.WithParams(t, dsn, "synchronous_commit", "off"))
	f := open(t, db, sqlfence.Postgres)
	ctx := context.Background()
	if err := f.Admit(ctx, "r", ep(3, "a")); err != nil {
		t.Fatal(err)
	}
	if err := f.Do(ctx, "r", ep(4, "a"), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := f.Tx(ctx, "r", ep(5, "a"), func(*sql.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	err := f.Tx(ctx, "r", ep(6, "a"), func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "SET LOCAL synchronous_commit = off")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// The control: the same sessions, a write to the fence row that is no
	// raise (the same term) commits as the session says.
	if _, err := db.ExecContext(ctx, "UPDATE termfence_fence SET term = term WHERE resource = 'r'"); err != nil {
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

// openApp opens sqlfence's PostgreSQL fence over sessions named app.
func openApp(t *testing.T, dsn, app string) *sqlfence.Fence {
	t.Helper()
	return open(t, sqltest.OpenPostgres(t, sqltest.WithParams(t, dsn, "application_name", app)), sqlfence.Postgres)
}

// TestPostgresRaiseTakesItsTurn: a raise waits for the older-epoch
// transactions that held the row before it asked, and those that begin
// after it wait for it (sqltest.RaiseTakesItsTurn).
func TestPostgresRaiseTakesItsTurn(t *testing.T) {
	dsn := sqltest.PostgresDSN(t)
	apps := "sqlturn_" + t.Name()
	older, raiser := openApp(t, dsn, apps+"_old"), openApp(t, dsn, apps+"_raise")
	sqltest.RaiseTakesItsTurn(t, dsn, older, raiser, apps+"_old", apps+"_raise")
}

// TestPostgresRaiseUnderStream: a raise is served under a continuous
// stream of older-epoch transactions, and none that began after it asked
// gets in ahead of it (sqltest.RaiseUnderStream).
func TestPostgresRaiseUnderStream(t *testing.T) {
	dsn := sqltest.PostgresDSN(t)
	apps := "sqlstream_" + t.Name()
	older, raiser := openApp(t, dsn, apps+"_old"), openApp(t, dsn, apps+"_raise")
	r := sqltest.RaiseUnderStream(t, dsn, older, raiser, apps+"_raise", 4, 2*time.Minute)
	t.Logf("raise served after %v; %d older-epoch transactions before it asked, %d admitted while it waited", r.Wait, r.Before, r.During)
}

// TestPostgresNestedDoWithRaisePending: a Do nested in a Do's write on the
// same resource neither deadlocks behind a pending raise nor escapes the
// fence (sqltest.NestedDoWithRaisePending).
func TestPostgresNestedDoWithRaisePending(t *testing.T) {
	dsn := sqltest.PostgresDSN(t)
	apps := "sqlnest_" + t.Name()
	f, raiser := openApp(t, dsn, apps+"_f"), openApp(t, dsn, apps+"_raise")
	sqltest.NestedDoWithRaisePending(t, dsn, f, raiser, apps+"_raise")
}
