package pgtrigger_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/termfence/termfence/epoch"
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

// TestFastPathAdmitsTheCurrentEpoch: a write under an authentic token of
// the resource's highest epoch is admitted by the guard's one-query fast
// path, without the full verification (counted per transaction by
// pg_stat_xact_user_functions), with the key without an ID and with one;
// a raise, a first write under a key ID, and every refusal take the full
// path. The guard's speed rests on this; its correctness does not (the
// full path decides the same), so only this test sees the fast path break.
// (Refusals are raised by the full path alone; a function that raises is
// not counted, so for them only the SQLSTATE is checked.)
func TestFastPathAdmitsTheCurrentEpoch(t *testing.T) {
	d := newDB(t)
	d.exec(t, "CREATE TABLE ledger (id int PRIMARY KEY, note text NOT NULL)")
	cfg := d.config("ledger")
	cfg.HMACKeys = map[string][]byte{"k2": otherKey}
	d.install(t, cfg)
	ctx := context.Background()
	// calls writes under token and returns how often the guard and its
	// full verification ran in that transaction, and the write's error.
	calls := func(token string) (guard, verify int, err error) {
		tx, err := pgtrigger.Begin(ctx, d.pool, token)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "SET LOCAL track_functions = 'pl'"); err != nil {
			t.Fatal(err)
		}
		// The counts of the session not yet flushed to the shared
		// statistics: read before and after the write.
		q := "SELECT coalesce(sum(calls) FILTER (WHERE funcname = 'guard'), 0), coalesce(sum(calls) FILTER (WHERE funcname = 'verify'), 0) FROM pg_stat_xact_user_functions WHERE schemaname = $1"
		var g0, v0 int
		if err := tx.QueryRow(ctx, q, d.private).Scan(&g0, &v0); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SAVEPOINT w"); err != nil {
			t.Fatal(err)
		}
		_, werr := tx.Exec(ctx, "UPDATE ledger SET note = 'y'")
		if werr != nil {
			if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT w"); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.QueryRow(ctx, q, d.private).Scan(&guard, &verify); err != nil {
			t.Fatal(err)
		}
		guard, verify = guard-g0, verify-v0
		if werr == nil {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return guard, verify, werr
	}
	withID := func(e epoch.Epoch) string { return signKey(t, epoch.HMACKey{ID: "k2", Secret: otherKey}, e) }
	for _, c := range []struct {
		name   string
		token  string
		verify int    // times the full verification runs, when admitted
		code   string // the refusal's SQLSTATE, or "" when admitted
	}{
		{"first write (a raise)", sign(t, key, ep(34, "node-b")), 1, ""},
		{"the highest epoch", sign(t, key, ep(34, "node-b")), 0, ""},
		{"the highest epoch again", sign(t, key, ep(34, "node-b")), 0, ""},
		{"the highest epoch, key k2", withID(ep(34, "node-b")), 0, ""},
		{"stale", sign(t, key, ep(33, "node-a")), 1, pgtrigger.CodeStale},
		{"conflicting", sign(t, key, ep(34, "node-x")), 1, pgtrigger.CodeConflict},
		{"forged", sign(t, bytes.Repeat([]byte("z"), 32), ep(34, "node-b")), 1, pgtrigger.CodeBadSignature},
		{"a raise to 35", withID(ep(35, "node-c")), 1, ""},
		{"35 under the key without an ID", sign(t, key, ep(35, "node-c")), 0, ""},
		{"34 after the raise", sign(t, key, ep(34, "node-b")), 1, pgtrigger.CodeStale},
	} {
		guard, verify, err := calls(c.token)
		if sqlState(err) != c.code {
			t.Errorf("%s: %v, want SQLSTATE %q", c.name, err, c.code)
			continue
		}
		if c.code != "" {
			continue // a function that raised is not counted; only the full path raises
		}
		if guard != 1 {
			t.Fatalf("%s: the guard ran %d times, want 1 (are function statistics counted?)", c.name, guard)
		}
		if verify != c.verify {
			t.Errorf("%s: full verification ran %d times, want %d", c.name, verify, c.verify)
		}
	}
}

// TestFastPathTrustsOnlyValidRows: the fast path admits a token whose text
// is exactly its resource's fence row, so it must not trust a row termfence
// could not have written: one the table's owner inserted by hand with a
// term of 0 or above the bound, a negative term, a name outside the name
// alphabet or too long. A token signed with the cluster's key over exactly
// such a row's text is refused as malformed, as the full path decides.
func TestFastPathTrustsOnlyValidRows(t *testing.T) {
	d := newDB(t)
	long := strings.Repeat("n", epoch.MaxNameLen+1)
	for i, row := range []struct {
		term   int64
		leader string
	}{
		{0, "node-a"},
		{-5, "node-a"},
		{int64(epoch.MaxTerm) + 1, "node-a"},
		{7, "node a"},
		{7, "node/a"},
		{7, "node:a"},
		{7, long},
	} {
		table := fmt.Sprintf("t%d", i)
		resource := "r" + table
		d.exec(t, "CREATE TABLE "+table+" (id int)")
		cfg := d.config(table)
		cfg.Resource = resource
		d.install(t, cfg)
		d.exec(t, "INSERT INTO termfence_fence (resource, cluster, term, leader) VALUES (convert_to($1, 'UTF8'), $2, $3, $4)",
			resource, cluster, row.term, row.leader)
		text := fmt.Sprintf("%s/%d/%s", cluster, row.term, row.leader)
		tx, err := pgtrigger.Begin(context.Background(), d.pool, handSign(key, text))
		if err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec(context.Background(), "INSERT INTO "+table+" VALUES (1)")
		tx.Rollback(context.Background())
		if code := sqlState(err); code != pgtrigger.CodeMalformed {
			t.Errorf("fence row %q, token over that text: %v, want SQLSTATE %s", text, err, pgtrigger.CodeMalformed)
		}
	}
}

// TestStaleRefusedAtOnce: a stale writer is refused at once, by its first
// read of the fence row, while a current transaction holds the row FOR
// SHARE — it never queues for the row lock, where it would hold up the
// current writers that come after it (they would queue behind its FOR
// UPDATE). The correct guard takes no lock on this path at all, so the
// stale session's lock_timeout can only fire if it waits. (Mutant T3 of
// internal/cmd/mutate: the first stale check off by one let term 33 through to the
// raise path, which refused it only once the current transaction ended.)
func TestStaleRefusedAtOnce(t *testing.T) {
	d := guarded(t)
	cur := d.session(t, "")
	if st, _ := cur.Run("BEGIN; SET LOCAL termfence.token = '" + sign(t, key, ep(34, "node-b")) + "'; UPDATE ledger SET note = 'current, open';"); st != "00000" {
		t.Fatalf("current write: %s", st)
	}
	stale := d.session(t, "")
	if st, _ := stale.Run("SET lock_timeout = '5s';"); st != "00000" {
		t.Fatalf("lock_timeout: %s", st)
	}
	for _, term := range []uint64{33, 32, 1} {
		st, _ := stale.Run("BEGIN; SET LOCAL termfence.token = '" + sign(t, key, ep(term, "node-a")) + "'; UPDATE ledger SET note = 'stale'; COMMIT;")
		if st != pgtrigger.CodeStale {
			t.Fatalf("a writer of term %d while a transaction of 34 is open: SQLSTATE %s, want %s at once (55P03: it queued for the row lock)", term, st, pgtrigger.CodeStale)
		}
		stale.Run("ROLLBACK;")
	}
	// A second current writer is not held up either.
	if st, _ := stale.Run("BEGIN; SET LOCAL termfence.token = '" + sign(t, key, ep(34, "node-b")) + "'; INSERT INTO ledger VALUES (2, 'second current'); COMMIT;"); st != "00000" {
		t.Fatalf("a second writer of 34 beside the open one: SQLSTATE %s", st)
	}
	if st, _ := cur.Run("COMMIT;"); st != "00000" {
		t.Fatalf("current commit: %s", st)
	}
	if n := d.count(t, "SELECT count(*) FROM ledger WHERE note = 'stale'"); n != 0 {
		t.Fatalf("%d stale writes committed", n)
	}
}

// TestWriterBehindNewerRaiseIsRefused: a writer of term 35 that queued
// behind a raise to 36 (both newer than the committed 34, so both take the
// raise path) is refused once the raise commits, and nothing it wrote
// commits. (Mutant T3b of internal/cmd/mutate: the raise path's stale check off by
// one admitted it.)
func TestWriterBehindNewerRaiseIsRefused(t *testing.T) {
	d := guarded(t)
	raise := d.session(t, "")
	if st, _ := raise.Run("BEGIN; SET LOCAL termfence.token = '" + sign(t, key, ep(36, "node-a")) + "'; INSERT INTO ledger VALUES (36, 'raise to 36');"); st != "00000" {
		t.Fatalf("raise: %s", st)
	}
	late := d.session(t, "")
	late.Send("\\set LAST_ERROR_SQLSTATE 00000\nBEGIN; SET LOCAL termfence.token = '" + sign(t, key, ep(35, "node-c")) + "'; INSERT INTO ledger VALUES (35, 'by 35'); COMMIT;")
	d.waitBlocked(t, 1)
	if st, _ := raise.Run("COMMIT;"); st != "00000" {
		t.Fatalf("raise commit: %s", st)
	}
	if st, _ := late.Wait(); st != pgtrigger.CodeStale {
		t.Fatalf("a writer of 35 queued behind the raise to 36: SQLSTATE %s, want %s", st, pgtrigger.CodeStale)
	}
	if n := d.count(t, "SELECT count(*) FROM ledger WHERE id = 35"); n != 0 {
		t.Fatal("the write of 35 committed after the raise to 36")
	}
	if h := d.highest(t, "ledger"); h != ep(36, "node-a") {
		t.Fatalf("fence = %v, want payments/36/node-a", h)
	}
}
