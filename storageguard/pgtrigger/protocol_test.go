package pgtrigger_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/pgfence"
	"github.com/termfence/termfence/storageguard/pgtrigger"
)

// waitBlocked waits (up to a minute) until n of the test's sessions wait
// for a lock (pg_stat_activity), and fails the test otherwise.
func (d *db) waitBlocked(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got := d.count(t, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND application_name = $1", d.private)
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions wait for a lock after a minute, want %d", got, n)
		}
		time.Sleep(5 * time.Millisecond) // polling the server, not waiting for an event we could receive
	}
}

// TestRaiseWaitsForInFlightWriter: a psql transaction that wrote under the
// current epoch holds the fence row until it ends. A raise by a Go writer
// through pgfence and one by a psql writer through the guard both wait for
// it; once it commits they go through, and the old epoch is refused from
// then on, in the session that held it too.
func TestRaiseWaitsForInFlightWriter(t *testing.T) {
	d := guarded(t)
	ctx := context.Background()
	old := d.session(t, "")
	if st, _ := old.Run("BEGIN; SET LOCAL termfence.token = '" + sign(t, key, ep(34, "node-b")) + "'; UPDATE ledger SET note = 'in flight under 34';"); st != "00000" {
		t.Fatalf("in-flight write failed: %s", st)
	}
	f, err := pgfence.Open(ctx, d.pool)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	goRaise := make(chan error, 1)
	go func() { goRaise <- f.Admit(ctx, "ledger", ep(35, "node-c")) }()
	newer := d.session(t, "")
	newer.Send("BEGIN; SET LOCAL termfence.token = '" + sign(t, key, ep(36, "node-a")) + "'; INSERT INTO ledger VALUES (36, 'by 36'); COMMIT;")
	d.waitBlocked(t, 2)
	select {
	case err := <-goRaise:
		t.Fatalf("pgfence raised to 35 while a psql write under 34 was in flight: %v", err)
	default:
	}
	if h := d.highest(t, "ledger"); h != ep(34, "node-b") {
		t.Fatalf("fence moved to %v while a write under 34 was in flight", h)
	}
	if st, _ := old.Run("COMMIT;"); st != "00000" {
		t.Fatalf("in-flight write's commit failed: %s", st)
	}
	if err := <-goRaise; err != nil && !errors.Is(err, storageguard.ErrStale) {
		t.Fatalf("pgfence raise to 35 after the commit: %v", err)
	}
	if st, _ := newer.Wait(); st != "00000" {
		t.Fatalf("psql raise to 36 after the commit failed: %s", st)
	}
	if h := d.highest(t, "ledger"); h != ep(36, "node-a") {
		t.Fatalf("fence = %v, want payments/36/node-a", h)
	}
	if n := d.count(t, "SELECT count(*) FROM ledger WHERE note = 'in flight under 34'"); n != 1 {
		t.Fatal("the in-flight write under 34 did not commit")
	}
	if st, _ := old.Run("BEGIN; SET LOCAL termfence.token = '" + sign(t, key, ep(34, "node-b")) + "'; UPDATE ledger SET note = 'late'; COMMIT;"); st != pgtrigger.CodeStale {
		t.Fatalf("a write under 34 after the raise: SQLSTATE %s, want %s", st, pgtrigger.CodeStale)
	}
	err = f.Tx(ctx, "ledger", ep(35, "node-c"), func(tx pgx.Tx) error { return nil })
	if !errors.Is(err, storageguard.ErrStale) {
		t.Fatalf("pgfence.Tx under 35 after the guard raised to 36: %v, want ErrStale", err)
	}
}

// TestWriterWaitingBehindRaiseIsRefused: the other order. A psql
// transaction raises to 35 and stays open holding the fence row FOR UPDATE;
// a psql writer and a Go writer through pgfence, both under 34 (still the
// highest committed epoch when they read it), wait behind it. Once the
// raise commits, both are refused: the guard looks at the row again after
// its FOR SHARE is granted, as pgfence does.
func TestWriterWaitingBehindRaiseIsRefused(t *testing.T) {
	d := guarded(t)
	ctx := context.Background()
	raise := d.session(t, "")
	if st, _ := raise.Run("BEGIN; SET LOCAL termfence.token = '" + sign(t, key, ep(35, "node-c")) + "'; INSERT INTO ledger VALUES (35, 'raise in flight');"); st != "00000" {
		t.Fatalf("raise: %s", st)
	}
	late := d.session(t, "")
	late.Send("\\set LAST_ERROR_SQLSTATE 00000\nBEGIN; SET LOCAL termfence.token = '" + sign(t, key, ep(34, "node-b")) + "'; UPDATE ledger SET note = 'late under 34'; COMMIT;")
	f, err := pgfence.Open(ctx, d.pool)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	goLate := make(chan error, 1)
	go func() {
		goLate <- f.Tx(ctx, "ledger", ep(34, "node-b"), func(tx pgx.Tx) error {
			if err := pgtrigger.Present(ctx, tx, sign(t, key, ep(34, "node-b"))); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "UPDATE ledger SET note = 'late under 34, Go'")
			return err
		})
	}()
	d.waitBlocked(t, 2)
	if st, _ := raise.Run("COMMIT;"); st != "00000" {
		t.Fatalf("raise commit: %s", st)
	}
	if st, _ := late.Wait(); st != pgtrigger.CodeStale {
		t.Fatalf("psql write under 34 queued behind the raise: SQLSTATE %s, want %s", st, pgtrigger.CodeStale)
	}
	if err := <-goLate; !errors.Is(err, storageguard.ErrStale) {
		t.Fatalf("pgfence.Tx under 34 queued behind the raise: %v, want ErrStale", err)
	}
	if n := d.count(t, "SELECT count(*) FROM ledger WHERE note LIKE 'late%'"); n != 0 {
		t.Fatalf("%d writes under 34 committed after the raise to 35", n)
	}
}
