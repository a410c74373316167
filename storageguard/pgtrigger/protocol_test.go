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
