package pgtrigger_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/termfence/termfence/storageguard/pgtrigger"
)

// plantTriggers is what a role with the TRIGGER privilege on table (and no
// token, and no INSERT, UPDATE or DELETE) does to write anyway: a
// statement trigger whose function inserts its own row, a row trigger
// that rewrites the leader's rows, and one that turns its DELETE into a
// silent no-op. They fire in the next leader's transaction, under its
// token.
func plantTriggers(schema, table string) string {
	return `CREATE FUNCTION plant() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF pg_catalog.pg_trigger_depth() = 1 THEN
    INSERT INTO ` + schema + `.` + table + ` VALUES (666, 'planted') ON CONFLICT DO NOTHING;
  END IF;
  RETURN NULL;
END$$;
CREATE FUNCTION rewrite() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN NEW.note := 'rewritten'; RETURN NEW; END$$;
CREATE FUNCTION keep() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$;
CREATE TRIGGER plant AFTER INSERT OR UPDATE OR DELETE ON ` + table + ` FOR EACH STATEMENT EXECUTE FUNCTION plant();
CREATE TRIGGER rewrite BEFORE INSERT OR UPDATE ON ` + table + ` FOR EACH ROW EXECUTE FUNCTION rewrite();
CREATE TRIGGER keep BEFORE DELETE ON ` + table + ` FOR EACH ROW EXECUTE FUNCTION keep();`
}

// leaderWrites is the current leader's transaction on ledger.
const leaderWrites = `BEGIN; SET LOCAL termfence.token = :'tok';
INSERT INTO ledger VALUES (2, 'by the leader');
UPDATE ledger SET note = 'updated by the leader' WHERE id = 2;
DELETE FROM ledger WHERE id = 1;
COMMIT;`

// TestTriggerPrivilegeIsAWritePath: a role holding TRIGGER on the guarded
// table (SELECT, TRIGGER; or GRANT ALL) but no token plants triggers that
// write in the next leader's transaction. The guard refuses that
// transaction (closed, CodeMisconfigured) as long as the grant or a
// trigger Install did not approve is there, Install refuses the table
// naming the grant and then the trigger, and once the owner removes both
// and installs again the leader writes as before.
func TestTriggerPrivilegeIsAWritePath(t *testing.T) {
	for _, grant := range []string{"SELECT, TRIGGER", "ALL"} {
		t.Run(grant, func(t *testing.T) {
			d := guarded(t)
			ctx := context.Background()
			r := d.role(t)
			d.exec(t, "GRANT USAGE, CREATE ON SCHEMA "+d.schema+" TO "+r)
			d.exec(t, "GRANT "+grant+" ON ledger TO "+r)
			d.mustPsql(t, r, plantTriggers(d.schema, "ledger"))
			tok := "tok=" + sign(t, key, ep(34, "node-b"))
			res := d.refusedWith(t, pgtrigger.CodeMisconfigured, "", leaderWrites, tok)
			if !strings.Contains(res.stderr, "TRIGGER") || !strings.Contains(res.stderr, r) {
				t.Errorf("the refusal does not name the grant to %s:\n%s", r, res.stderr)
			}
			if n := d.count(t, "SELECT count(*) FROM ledger WHERE id <> 1 OR note <> 'first'"); n != 0 {
				t.Fatalf("%d rows planted or rewritten through the TRIGGER privilege", n)
			}
			err := pgtrigger.Install(ctx, d.pool, d.config("ledger"))
			if !errors.Is(err, pgtrigger.ErrUnsafe) || !strings.Contains(err.Error(), "TRIGGER") || !strings.Contains(err.Error(), r) {
				t.Fatalf("Install with TRIGGER granted to %s = %v, want ErrUnsafe naming the grant", r, err)
			}

			// The grant revoked, the planted triggers stay: still closed.
			d.exec(t, "REVOKE ALL ON ledger FROM "+r)
			res = d.refusedWith(t, pgtrigger.CodeMisconfigured, "", leaderWrites, tok)
			if !strings.Contains(res.stderr, "plant") && !strings.Contains(res.stderr, "rewrite") && !strings.Contains(res.stderr, "keep") {
				t.Errorf("the refusal does not name a planted trigger:\n%s", res.stderr)
			}
			err = pgtrigger.Install(ctx, d.pool, d.config("ledger"))
			if !errors.Is(err, pgtrigger.ErrUnsafe) || !strings.Contains(err.Error(), r) {
				t.Fatalf("Install with triggers calling %s's functions = %v, want ErrUnsafe naming them", r, err)
			}
			d.exec(t, "DROP TRIGGER plant ON ledger; DROP TRIGGER rewrite ON ledger; DROP TRIGGER keep ON ledger")
			d.install(t, d.config("ledger"))
			d.mustPsql(t, "", leaderWrites, tok)
			if n := d.count(t, "SELECT count(*) FROM ledger WHERE id = 2 AND note = 'updated by the leader'"); n != 1 || d.count(t, "SELECT count(*) FROM ledger") != 1 {
				t.Fatal("the leader's writes did not land as written")
			}
		})
	}
}

// TestTriggerPrivilegeTree: the same through a partition (a row trigger
// on a partition fires for rows routed through the guarded parent, whose
// statement trigger is the only one that runs) and through the fence
// table (a trigger there could rewrite a raise: the raise is refused).
func TestTriggerPrivilegeTree(t *testing.T) {
	t.Run("partition", func(t *testing.T) {
		d := newDB(t)
		d.exec(t, `CREATE TABLE events (id int, note text) PARTITION BY RANGE (id);
CREATE TABLE events_low PARTITION OF events FOR VALUES FROM (0) TO (1000)`)
		d.install(t, d.config("events"))
		r := d.role(t)
		d.exec(t, "GRANT USAGE, CREATE ON SCHEMA "+d.schema+" TO "+r)
		d.exec(t, "GRANT SELECT, TRIGGER ON events_low TO "+r)
		d.mustPsql(t, r, plantTriggers(d.schema, "events_low"))
		tok := "tok=" + sign(t, key, ep(5, "n1"))
		d.refusedWith(t, pgtrigger.CodeMisconfigured, "", "BEGIN; SET LOCAL termfence.token = :'tok'; INSERT INTO events VALUES (1, 'by the leader'); COMMIT;", tok)
		if n := d.count(t, "SELECT count(*) FROM events"); n != 0 {
			t.Fatalf("%d rows written", n)
		}
		if err := pgtrigger.Install(context.Background(), d.pool, d.config("events")); !errors.Is(err, pgtrigger.ErrUnsafe) || !strings.Contains(err.Error(), "events_low") {
			t.Fatalf("Install with TRIGGER on a partition = %v, want ErrUnsafe naming it", err)
		}
	})
	t.Run("grant alone", func(t *testing.T) {
		// No trigger yet. On a table alone, the statement's own lock keeps
		// a trigger from appearing under it; the grant closes the table at
		// the next raise. On a partitioned table, where a partition may be
		// locked only when rows are routed to it, at once.
		d := newDB(t)
		d.exec(t, `CREATE TABLE ledger (id int PRIMARY KEY, note text NOT NULL);
CREATE TABLE events (id int, note text) PARTITION BY RANGE (id);
CREATE TABLE events_low PARTITION OF events FOR VALUES FROM (0) TO (1000)`)
		d.install(t, d.config("ledger"))
		cfg := d.config("events")
		cfg.Resource = "events"
		d.install(t, cfg)
		tok := "tok=" + sign(t, key, ep(5, "n1"))
		d.mustPsql(t, "", "BEGIN; SET LOCAL termfence.token = :'tok'; INSERT INTO ledger VALUES (1, 'x'); INSERT INTO events VALUES (1, 'x'); COMMIT;", tok)
		r := d.role(t)
		d.exec(t, "GRANT TRIGGER ON ledger, events_low TO "+r)
		d.refusedWith(t, pgtrigger.CodeMisconfigured, "", "BEGIN; SET LOCAL termfence.token = :'tok'; INSERT INTO events VALUES (2, 'x'); COMMIT;", tok)
		d.mustPsql(t, "", "BEGIN; SET LOCAL termfence.token = :'tok'; INSERT INTO ledger VALUES (2, 'x'); COMMIT;", tok)
		d.refusedWith(t, pgtrigger.CodeMisconfigured, "", "BEGIN; SET LOCAL termfence.token = :'tok'; INSERT INTO ledger VALUES (3, 'x'); COMMIT;", "tok="+sign(t, key, ep(6, "n2")))
		if err := pgtrigger.Install(context.Background(), d.pool, d.config("ledger")); !errors.Is(err, pgtrigger.ErrUnsafe) {
			t.Fatalf("Install with TRIGGER granted = %v, want ErrUnsafe", err)
		}
	})
	t.Run("named like the guard's own", func(t *testing.T) {
		d := guarded(t)
		r := d.role(t)
		d.exec(t, "GRANT USAGE, CREATE ON SCHEMA "+d.schema+" TO "+r)
		d.exec(t, "GRANT SELECT, TRIGGER ON ledger TO "+r)
		d.mustPsql(t, r, strings.NewReplacer("TRIGGER plant", "TRIGGER termfence_monotonic", "TRIGGER rewrite", "TRIGGER termfence_monotonic_truncate", "CREATE TRIGGER keep", "-- ").Replace(plantTriggers(d.schema, "ledger")))
		d.exec(t, "REVOKE ALL ON ledger FROM "+r)
		d.refusedWith(t, pgtrigger.CodeMisconfigured, "", leaderWrites, "tok="+sign(t, key, ep(34, "node-b")))
		if n := d.count(t, "SELECT count(*) FROM ledger WHERE id <> 1 OR note <> 'first'"); n != 0 {
			t.Fatalf("%d rows planted or rewritten", n)
		}
	})
	t.Run("fence table", func(t *testing.T) {
		d := guarded(t)
		r := d.role(t)
		d.exec(t, "GRANT USAGE ON SCHEMA "+d.schema+" TO "+r)
		d.exec(t, "GRANT TRIGGER ON termfence_fence TO "+r)
		// A trigger on the fence table fires when the row is written: the
		// next raise is refused, and so is every write from then on.
		tok := "tok=" + sign(t, key, ep(35, "node-c"))
		d.refusedWith(t, pgtrigger.CodeMisconfigured, "", leaderWrites, tok)
		if h := d.highest(t, "ledger"); h != ep(34, "node-b") {
			t.Fatalf("fence = %v, want payments/34/node-b", h)
		}
		if err := pgtrigger.Install(context.Background(), d.pool, d.config("ledger")); !errors.Is(err, pgtrigger.ErrUnsafe) || !strings.Contains(err.Error(), "termfence_fence") {
			t.Fatalf("Install with TRIGGER on the fence table = %v, want ErrUnsafe naming it", err)
		}
		d.exec(t, "REVOKE TRIGGER ON termfence_fence FROM "+r)
		d.mustPsql(t, "", leaderWrites, tok)
	})
}

// TestOwnersTriggers: a trigger the owner made before Install (its
// function the owner's) is approved and keeps working; one added after
// Install closes the table (CodeMisconfigured) until Install runs again,
// as a partition added later needs it too.
func TestOwnersTriggers(t *testing.T) {
	d := newDB(t)
	d.exec(t, `CREATE TABLE ledger (id int PRIMARY KEY, note text NOT NULL);
CREATE TABLE audit (n int);
CREATE FUNCTION audit() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN INSERT INTO audit VALUES (1); RETURN NULL; END$$;
CREATE TRIGGER audit AFTER INSERT ON ledger FOR EACH STATEMENT EXECUTE FUNCTION audit()`)
	d.install(t, d.config("ledger"))
	write := "BEGIN; SET LOCAL termfence.token = :'tok'; INSERT INTO ledger SELECT coalesce(max(id), 0) + 1, 'x' FROM ledger; COMMIT;"
	tok := "tok=" + sign(t, key, ep(5, "n1"))
	d.mustPsql(t, "", write, tok)
	d.exec(t, "CREATE TRIGGER audit_later AFTER INSERT ON ledger FOR EACH STATEMENT EXECUTE FUNCTION audit()")
	res := d.refusedWith(t, pgtrigger.CodeMisconfigured, "", write, tok)
	if !strings.Contains(res.stderr, "audit_later") || !strings.Contains(res.stderr, "Install") {
		t.Errorf("the refusal does not name the new trigger and the remedy:\n%s", res.stderr)
	}
	d.install(t, d.config("ledger"))
	d.mustPsql(t, "", write, tok)
	if n := d.count(t, "SELECT count(*) FROM audit"); n != 3 {
		t.Fatalf("audit has %d rows, want 3 (one, then two triggers)", n)
	}
}
