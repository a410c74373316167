package pgtrigger_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/termfence/termfence/storageguard/internal/pgtest"
	"github.com/termfence/termfence/storageguard/internal/sqltest"
	"github.com/termfence/termfence/storageguard/pgtrigger"
)

// hasWeakness reports whether ws has one of kind about a relation named
// rel.
func hasWeakness(ws []pgtrigger.Weakness, kind pgtrigger.WeaknessKind, rel string) bool {
	for _, w := range ws {
		if w.Kind == kind && w.Relation == rel {
			return true
		}
	}
	return false
}

// TestReplicatedWritesRefused: logical replication's apply worker fires no
// statement triggers, so the guard's statement trigger alone let the
// publisher's rows land in a guarded subscriber table with no token. The
// guard's row trigger (ENABLE ALWAYS, for session_replication_role =
// replica) refuses them: the subscription stops with an apply error and
// the row never lands, while a row of an unguarded table of the same
// subscription, replicated first, does (replication runs). Audit names the
// subscription.
func TestReplicatedWritesRefused(t *testing.T) {
	s := pgtest.Start(t, "wal_level=logical", "max_replication_slots=4", "max_wal_senders=4", "autovacuum=off")
	s.Exec("postgres", "CREATE DATABASE pub")
	s.Exec("postgres", "CREATE DATABASE sub")
	tables := "CREATE TABLE ledger (n BIGINT PRIMARY KEY, term BIGINT NOT NULL); CREATE TABLE open (n BIGINT PRIMARY KEY)"
	s.Exec("pub", tables+"; CREATE PUBLICATION p FOR TABLE ledger, open")
	s.Exec("pub", "SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
	s.Exec("sub", tables)
	ctx := context.Background()
	subPool := openPool(t, s.DSN("sub"))
	if err := pgtrigger.Install(ctx, subPool, pgtrigger.Config{Table: "ledger", Resource: "ledger", Cluster: cluster, HMACKey: key, Schema: "tfp"}); err != nil {
		t.Fatal(err)
	}
	pubDSN := s.DSN("pub")
	s.Exec("sub", fmt.Sprintf("CREATE SUBSCRIPTION s CONNECTION '%s' PUBLICATION p WITH (create_slot = false, slot_name = 's', copy_data = false)", pubDSN))
	t.Cleanup(func() {
		// Stop the apply worker before the server goes.
		subPool.Exec(context.Background(), "ALTER SUBSCRIPTION s DISABLE")
	})
	count := func(q string) int {
		var n int
		if err := subPool.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	s.Exec("pub", "INSERT INTO open VALUES (1)")
	sqltest.WaitFor(t, 2*time.Minute, "the unguarded row to replicate", func() bool { return count("SELECT count(*) FROM open") == 1 })
	s.Exec("pub", "INSERT INTO ledger VALUES (1, 5)")
	sqltest.WaitFor(t, 2*time.Minute, "the subscription's apply error", func() bool {
		return count("SELECT COALESCE(sum(apply_error_count), 0)::int FROM pg_stat_subscription_stats") >= 1 || count("SELECT count(*) FROM ledger") > 0
	})
	if n := count("SELECT count(*) FROM ledger"); n != 0 {
		t.Fatalf("the apply worker wrote %d rows into the guarded table without a token", n)
	}
	ws, err := pgtrigger.Audit(ctx, subPool, "ledger")
	if err != nil {
		t.Fatal(err)
	}
	if !hasWeakness(ws, pgtrigger.WeakSubscription, "public.ledger") {
		t.Fatalf("Audit = %v, want the subscription into public.ledger", ws)
	}
}

// TestPreparedTransactionHolds: a prepared transaction that wrote under
// epoch 5 through the guard holds the fence row across a server restart,
// and a newer epoch's raise waits for it until ROLLBACK PREPARED (the
// documented behaviour: nothing but its owner or a superuser can end it).
// Audit names it, before and after the restart.
func TestPreparedTransactionHolds(t *testing.T) {
	s := pgtest.Start(t, "max_prepared_transactions=4", "autovacuum=off")
	ctx := context.Background()
	pool := openPool(t, s.DSN("postgres"))
	if _, err := pool.Exec(ctx, "CREATE TABLE ledger (n BIGSERIAL PRIMARY KEY, term BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if err := pgtrigger.Install(ctx, pool, pgtrigger.Config{Table: "ledger", Resource: "ledger", Cluster: cluster, HMACKey: key, Schema: "tfp"}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "BEGIN; SET LOCAL termfence.token = '"+sign(t, key, ep(5, "a"))+"'; INSERT INTO ledger (term) VALUES (5); PREPARE TRANSACTION 'held'"); err != nil {
		t.Fatal(err)
	}
	pool.Close()
	audit := func(when string) {
		t.Helper()
		p := openPool(t, s.DSN("postgres"))
		defer p.Close()
		ws, err := pgtrigger.Audit(ctx, p, "ledger")
		if err != nil {
			t.Fatal(err)
		}
		if !hasWeakness(ws, pgtrigger.WeakPrepared, "termfence_fence") && !hasWeakness(ws, pgtrigger.WeakPrepared, "public.termfence_fence") {
			t.Fatalf("%s: Audit = %v, want the prepared transaction on the fence table", when, ws)
		}
	}
	audit("before the restart")
	s.Crash()
	s.Restart()
	audit("after the restart")

	dsn := sqltest.WithParams(t, s.DSN("postgres"), "application_name", "raiser")
	raiser := guardFence{t: t, pool: openPool(t, dsn), tables: map[string]string{"ledger": "ledger"}}
	raised := make(chan error, 1)
	go func() { raised <- raiser.Admit(ctx, "ledger", ep(6, "b")) }()
	sqltest.WaitFor(t, time.Minute, "the raise to wait for the prepared transaction", func() bool {
		select {
		case err := <-raised:
			raised <- err
			return true
		default:
		}
		return sqltest.LockWaiters(t, dsn, "raiser") >= 1
	})
	select {
	case err := <-raised:
		t.Fatalf("the raise returned (%v) while a prepared transaction held the fence row under the older epoch", err)
	default:
	}
	s.Exec("postgres", "ROLLBACK PREPARED 'held'")
	if err := <-raised; err != nil {
		t.Fatalf("the raise after ROLLBACK PREPARED: %v", err)
	}
}
