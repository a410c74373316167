package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/termfence/termfence/storageguard/internal/sqltest"
	"github.com/termfence/termfence/storageguard/sqlfence"
)

// TestSQLiteOffConnectionRefused: a pool connection set to
// synchronous=OFF after the raise (a PRAGMA the application ran on one
// connection) is refused for every transaction of the fence, not only
// for a raise: its commit's checkpoint would write the raise's pages into
// the database unsynced and let the next commit reuse the WAL over the
// synced frames that held it, so the acknowledged raise would be lost at
// a power cut (TestSQLiteOffConnectionPowerLoss shows it on powerfs). The
// old check looked only at the raising connection: the same-epoch Tx and
// Do committed on the OFF connection.
func TestSQLiteOffConnectionRefused(t *testing.T) {
	db := sqltest.OpenSQLite(t, filepath.Join(t.TempDir(), "fence.db"))
	db.SetMaxOpenConns(1) // one connection: the fence must use the one set to OFF
	f := open(t, db, sqlfence.SQLite)
	ctx := context.Background()
	if err := f.Admit(ctx, "r", ep(5, "a")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE app (x BLOB)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "PRAGMA synchronous=OFF"); err != nil {
		t.Fatal(err)
	}
	wrote := false
	err := f.Tx(ctx, "r", ep(5, "a"), func(tx *sql.Tx) error {
		wrote = true
		_, err := tx.ExecContext(ctx, "INSERT INTO app VALUES (zeroblob(100))")
		return err
	})
	if !errors.Is(err, sqlfence.ErrNotDurable) || wrote {
		t.Fatalf("same-epoch Tx on a connection at synchronous=OFF = %v (fn ran: %v), want ErrNotDurable before fn", err, wrote)
	}
	ran := false
	if err := f.Do(ctx, "r", ep(5, "a"), func(context.Context) error { ran = true; return nil }); !errors.Is(err, sqlfence.ErrNotDurable) || ran {
		t.Fatalf("same-epoch Do on a connection at synchronous=OFF = %v (write ran: %v), want ErrNotDurable", err, ran)
	}
	if err := f.Admit(ctx, "r", ep(6, "a")); !errors.Is(err, sqlfence.ErrNotDurable) {
		t.Fatalf("raise on a connection at synchronous=OFF = %v, want ErrNotDurable", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM app").Scan(&n); err != nil || n != 0 {
		t.Fatalf("app rows after refused transactions: %d, %v; want 0", n, err)
	}
	// Back at FULL, the connection is accepted again: the check reads the
	// setting in each transaction, it remembers nothing.
	if _, err := db.ExecContext(ctx, "PRAGMA synchronous=FULL"); err != nil {
		t.Fatal(err)
	}
	if err := f.Tx(ctx, "r", ep(5, "a"), func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO app VALUES (zeroblob(100))")
		return err
	}); err != nil {
		t.Fatalf("Tx at synchronous=FULL again: %v", err)
	}
	if h, err := f.Highest(ctx, "r"); err != nil || h.Term != 5 {
		t.Fatalf("Highest = %v, %v; want term 5", h, err)
	}
}
