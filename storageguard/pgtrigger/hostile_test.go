package pgtrigger_test

import (
	"encoding/hex"
	"strings"
	"testing"

	"github.com/termfence/termfence/storageguard/pgtrigger"
)

// hostile returns the test database with ledger guarded (and, for the
// cascade cases, child rows in guarded tables that reference parent, which
// is not guarded, and child_deferred, whose rows a deferred constraint
// trigger deletes at COMMIT when their parent_d row goes) and an ordinary
// role that may read and write ledger and
// parent, write the fence table termfence_fence and create objects in the
// test's schema, as an application's or a batch job's role would — but
// holds no token.
func hostile(t *testing.T) (*db, string) {
	t.Helper()
	d := guarded(t)
	d.exec(t, `CREATE TABLE parent (id int PRIMARY KEY);
INSERT INTO parent VALUES (1), (2);
CREATE TABLE parent_d (id int PRIMARY KEY);
INSERT INTO parent_d VALUES (1), (2);
CREATE TABLE child (id int PRIMARY KEY, pid int REFERENCES parent ON DELETE CASCADE ON UPDATE CASCADE);
CREATE TABLE child_deferred (id int PRIMARY KEY, pid int);
CREATE FUNCTION cascade_later() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN DELETE FROM `+d.schema+`.child_deferred WHERE pid = OLD.id; RETURN NULL; END$$;
CREATE CONSTRAINT TRIGGER cascade_later AFTER DELETE ON parent_d DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION cascade_later()`)
	for _, table := range []string{"child", "child_deferred"} {
		cfg := d.config(table)
		cfg.HMACKey = nil // the cluster's stored key
		d.install(t, cfg)
	}
	d.mustPsql(t, "", `BEGIN; SET LOCAL termfence.token = :'tok';
INSERT INTO child VALUES (1, 1), (2, 2); INSERT INTO child_deferred VALUES (1, 1), (2, 2); COMMIT;`,
		"tok="+sign(t, key, ep(34, "node-b")))
	r := d.role(t)
	d.exec(t, "GRANT USAGE, CREATE ON SCHEMA "+d.schema+" TO "+r)
	d.exec(t, "GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES ON ledger, parent, parent_d, child, child_deferred TO "+r)
	// As Go writers through pgfence or sqlfence need.
	d.exec(t, "GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON termfence_fence TO "+r)
	d.exec(t, "ANALYZE "+d.private+".hmac_key") // statistics exist, so a leak through pg_stats would show
	return d, r
}

// TestHostileRole tries, as an ordinary role with no token, every way
// around the guard that the package documentation claims is closed. Each
// must fail with the given SQLSTATE (42501: insufficient privilege), and in
// the end the guarded tables and the fence row are unchanged.
func TestHostileRole(t *testing.T) {
	d, r := hostile(t)
	p := d.private
	for _, c := range []struct{ name, code, script string }{
		// The key.
		{"read the key", "42501", "SELECT key FROM " + p + ".hmac_key;"},
		{"call verify", "42501", "SELECT * FROM " + p + ".verify('payments/1/x', 'payments', true);"},
		{"call the guard", "42501", "SELECT " + p + ".guard();"},
		// Switching the guard off.
		{"disable the trigger", "42501", "ALTER TABLE ledger DISABLE TRIGGER " + pgtrigger.TriggerName + ";"},
		{"disable all triggers", "42501", "ALTER TABLE ledger DISABLE TRIGGER ALL;"},
		{"drop the trigger", "42501", "DROP TRIGGER " + pgtrigger.TriggerName + " ON ledger;"},
		{"replace the guard function", "42501", "CREATE OR REPLACE FUNCTION " + p + ".guard() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$;"},
		{"replace verify", "42501", "CREATE OR REPLACE FUNCTION " + p + ".verify(text, text, boolean, OUT code text, OUT msg text, OUT cluster text, OUT term bigint, OUT leader text) LANGUAGE sql AS $$SELECT NULL::text, NULL::text, 'payments', 99::bigint, 'x'$$;"},
		{"drop the private schema", "42501", "DROP SCHEMA " + p + " CASCADE;"},
		{"replica mode", "42501", "SET session_replication_role = replica;"},
		{"a rule", "42501", "CREATE RULE bypass AS ON INSERT TO ledger DO INSTEAD NOTHING;"},
		{"a trigger of its own", "42501", "CREATE FUNCTION noop() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$; CREATE TRIGGER a_first BEFORE INSERT ON ledger FOR EACH STATEMENT EXECUTE FUNCTION noop();"},
		{"take the table", "42501", "ALTER TABLE ledger OWNER TO " + r + ";"},
		// The high-water mark, which the role may write.
		{"lower the fence row", pgtrigger.CodeFenceRegress, "UPDATE termfence_fence SET term = 1;"},
		{"delete the fence row", pgtrigger.CodeFenceRegress, "DELETE FROM termfence_fence;"},
		{"truncate the fence table", pgtrigger.CodeFenceRegress, "TRUNCATE termfence_fence;"},
		{"wedge the fence row", pgtrigger.CodeNoToken, "UPDATE termfence_fence SET term = 281474976710656;"},
		{"give the fence row to another cluster", pgtrigger.CodeForeign, "INSERT INTO termfence_fence VALUES (convert_to('ledger', 'UTF8'), 'evil', 1, 'x') ON CONFLICT DO NOTHING;"},
		{"a trigger on the fence table", "42501", "CREATE FUNCTION lower() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN NEW.term := 1; RETURN NEW; END$$; CREATE TRIGGER zz BEFORE UPDATE ON termfence_fence FOR EACH ROW EXECUTE FUNCTION lower();"},
		// Writes by every route, with no token.
		{"insert", pgtrigger.CodeNoToken, "INSERT INTO ledger VALUES (9, 'x');"},
		{"copy from", pgtrigger.CodeNoToken, "COPY ledger FROM STDIN;\n9\tx\n\\.\n"},
		{"on conflict", pgtrigger.CodeNoToken, "INSERT INTO ledger VALUES (1, 'x') ON CONFLICT (id) DO UPDATE SET note = 'x';"},
		{"writable cte", pgtrigger.CodeNoToken, "WITH d AS (DELETE FROM ledger RETURNING 1) SELECT count(*) FROM d;"},
		{"merge", pgtrigger.CodeNoToken, "MERGE INTO ledger l USING (SELECT 1 AS id) s ON l.id = s.id WHEN MATCHED THEN DELETE;"},
		{"truncate", pgtrigger.CodeNoToken, "TRUNCATE ledger;"},
		{"through a view", pgtrigger.CodeNoToken, "CREATE VIEW v AS SELECT * FROM ledger; DELETE FROM v;"},
		{"in a DO block", pgtrigger.CodeNoToken, "DO $$BEGIN DELETE FROM ledger; END$$;"},
		{"in a function of its own", pgtrigger.CodeNoToken, "CREATE FUNCTION wipe() RETURNS void SECURITY DEFINER LANGUAGE sql AS $$DELETE FROM ledger$$; SELECT wipe();"},
		{"cascade from an unguarded parent", pgtrigger.CodeNoToken, "DELETE FROM parent WHERE id = 1;"},
		{"cascaded update", pgtrigger.CodeNoToken, "UPDATE parent SET id = 3 WHERE id = 2;"},
		{"deferred trigger's write, at commit", pgtrigger.CodeNoToken, "BEGIN; DELETE FROM parent_d WHERE id = 2; SELECT 'deleted, not yet cascaded'; COMMIT;"},
		{"truncate cascade", pgtrigger.CodeNoToken, "TRUNCATE parent CASCADE;"},
		// Objects that would stand in for the guard's own, by name.
		{"shadow objects", pgtrigger.CodeNoToken, `CREATE TEMP TABLE termfence_fence (resource bytea, cluster text, term bigint, leader text);
CREATE FUNCTION pg_temp.current_setting(text, boolean) RETURNS text LANGUAGE sql AS $$SELECT 'payments/99/x'$$;
CREATE FUNCTION hmac(bytea, bytea, text) RETURNS bytea LANGUAGE sql AS $$SELECT '\x00'::bytea$$;
CREATE FUNCTION sha256(bytea) RETURNS bytea LANGUAGE sql AS $$SELECT '\x00'::bytea$$;
CREATE FUNCTION regexp_match(text, text) RETURNS text[] LANGUAGE sql AS $$SELECT ARRAY['payments', '99', 'x']$$;
SET search_path = pg_temp, ` + d.schema + `, public;
DELETE FROM ledger;`},
		{"session parameters", pgtrigger.CodeNoToken, "SET check_function_bodies = off; SET plpgsql.variable_conflict = use_variable; SET standard_conforming_strings = off; DELETE FROM ledger;"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := d.refusedWith(t, c.code, r, c.script).stdout
			if strings.Contains(c.script, "not yet cascaded") && !strings.Contains(out, "not yet cascaded") {
				t.Fatalf("the deferred write was refused before COMMIT; this case tests the refusal at COMMIT:\n%s", out)
			}
		})
	}
	// A stale token through the shadowing objects is still stale, a forged
	// one still forged, and the current one still works: the guard calls
	// its own hmac and comparisons, not the role's ("<" that never finds a
	// term older, "=" that finds every signature equal), even with the
	// role's schema before pg_catalog on its search_path.
	shadow := `CREATE OR REPLACE FUNCTION hmac(bytea, bytea, text) RETURNS bytea LANGUAGE sql AS $$SELECT '\x00'::bytea$$;
CREATE OR REPLACE FUNCTION never(bigint, bigint) RETURNS boolean LANGUAGE sql AS $$SELECT false$$;
CREATE OR REPLACE FUNCTION always(bytea, bytea) RETURNS boolean LANGUAGE sql AS $$SELECT true$$;
DROP OPERATOR IF EXISTS ` + d.schema + `.< (bigint, bigint);
CREATE OPERATOR ` + d.schema + `.< (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = never);
DROP OPERATOR IF EXISTS ` + d.schema + `.= (bytea, bytea);
CREATE OPERATOR ` + d.schema + `.= (LEFTARG = bytea, RIGHTARG = bytea, FUNCTION = always);
SET search_path = ` + d.schema + `, pg_catalog, pg_temp, public;
BEGIN; SET LOCAL termfence.token = :'tok'; DELETE FROM ledger WHERE id = 7; COMMIT;`
	d.refusedWith(t, pgtrigger.CodeStale, r, shadow, "tok="+sign(t, key, ep(33, "node-a")))
	d.refusedWith(t, pgtrigger.CodeBadSignature, r, shadow, "tok="+sign(t, otherKey, ep(99, "mallory")))
	d.mustPsql(t, r, shadow, "tok="+sign(t, key, ep(34, "node-b")))

	if n := d.count(t, "SELECT count(*) FROM ledger") + d.count(t, "SELECT count(*) FROM child") + d.count(t, "SELECT count(*) FROM child_deferred"); n != 5 {
		t.Fatalf("the guarded tables hold %d rows, want the 5 written with the token", n)
	}
	if n := d.count(t, "SELECT count(*) FROM parent") + d.count(t, "SELECT count(*) FROM parent_d"); n != 4 {
		t.Fatalf("the parents hold %d rows, want 4: the cascades were refused, so their deletes were too", n)
	}
	if h := d.highest(t, "ledger"); h != ep(34, "node-b") {
		t.Fatalf("fence = %v, want payments/34/node-b", h)
	}

	// What the role can read of the guard — the functions' source, the
	// triggers' arguments, the statistics views — holds no trace of the
	// key.
	out := d.mustPsql(t, r, `SELECT prosrc FROM pg_proc WHERE pronamespace = '`+p+`'::regnamespace;
SELECT encode(tgargs, 'escape') FROM pg_trigger WHERE tgname = '`+pgtrigger.TriggerName+`';
SELECT count(*) FROM pg_stats WHERE schemaname = '`+p+`';`)
	if !strings.Contains(out, "hmac") || !strings.Contains(out, "payments") {
		t.Fatalf("the role could not read the guard's source and arguments; the check below would prove nothing:\n%s", out)
	}
	if strings.Contains(out, string(key)) || strings.Contains(out, hex.EncodeToString(key)) {
		t.Fatal("the key is visible to an ordinary role")
	}
	if !strings.HasSuffix(strings.TrimSpace(out), "\n0") {
		t.Fatalf("pg_stats shows the private schema's statistics to the role:\n%s", out)
	}
}

// TestHostileRoleWithTrigger: the hostile role of TestHostileRole holds
// TRIGGER on the guarded tables and on an unguarded parent too (GRANT
// TRIGGER, or GRANT ALL) and plants triggers that would write under the
// next leader's token: rows of its own, rewritten rows, DELETEs turned into
// no-ops. From then on the guard refuses every write, the current leader's
// by every route included (closed, CodeMisconfigured), and nothing the
// triggers would have written commits; the fence row still needs a token.
func TestHostileRoleWithTrigger(t *testing.T) {
	d, r := hostile(t)
	d.exec(t, "GRANT TRIGGER ON ledger, child, child_deferred, parent TO "+r)
	d.mustPsql(t, r, plantTriggers(d.schema, "ledger")+`
CREATE TRIGGER plant AFTER INSERT OR UPDATE OR DELETE ON child FOR EACH STATEMENT EXECUTE FUNCTION plant();
CREATE TRIGGER plant AFTER DELETE ON parent FOR EACH STATEMENT EXECUTE FUNCTION plant();`)
	tok := "tok=" + sign(t, key, ep(34, "node-b"))
	withTok := func(sql string) string { return "BEGIN; SET LOCAL termfence.token = :'tok'; " + sql + " COMMIT;" }
	for _, c := range []struct{ name, role, script string }{
		{"leader's insert", "", withTok("INSERT INTO ledger VALUES (2, 'by the leader');")},
		{"leader's update", "", withTok("UPDATE ledger SET note = 'by the leader';")},
		{"leader's delete", "", withTok("DELETE FROM ledger;")},
		{"leader's copy", "", "BEGIN; SET LOCAL termfence.token = :'tok';\nCOPY ledger FROM STDIN;\n9\tx\n\\.\nCOMMIT;"},
		{"leader's merge", "", withTok("MERGE INTO ledger l USING (SELECT 1 AS id) s ON l.id = s.id WHEN MATCHED THEN UPDATE SET note = 'm';")},
		{"leader's truncate", "", withTok("TRUNCATE ledger;")},
		{"leader's write to a child", "", withTok("INSERT INTO child VALUES (3, 1);")},
		{"leader's cascade", "", withTok("DELETE FROM parent WHERE id = 1;")},
		{"hostile, under the leader's token", r, withTok("INSERT INTO ledger VALUES (3, 'x');")},
		{"hostile, no token", r, "INSERT INTO ledger VALUES (3, 'x');"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d.refusedWith(t, pgtrigger.CodeMisconfigured, c.role, c.script, tok)
		})
	}
	d.refusedWith(t, pgtrigger.CodeNoToken, r, "UPDATE termfence_fence SET term = 281474976710656;")
	if n := d.count(t, "SELECT count(*) FROM ledger WHERE id <> 1 OR note <> 'first'"); n != 0 {
		t.Fatalf("%d rows of ledger planted or rewritten", n)
	}
	if n := d.count(t, "SELECT count(*) FROM ledger") + d.count(t, "SELECT count(*) FROM child") + d.count(t, "SELECT count(*) FROM parent"); n != 5 {
		t.Fatalf("ledger, child and parent hold %d rows, want 5 as before", n)
	}
	if h := d.highest(t, "ledger"); h != ep(34, "node-b") {
		t.Fatalf("fence = %v, want payments/34/node-b", h)
	}
}

// TestReplicaModeStillGuarded: the guard is ENABLE ALWAYS, so even a
// session in session_replication_role = replica (which a superuser, or a
// role granted SET on it, can enter to skip ordinary triggers) is checked.
func TestReplicaModeStillGuarded(t *testing.T) {
	d := guarded(t)
	d.refusedWith(t, pgtrigger.CodeNoToken, "", "SET session_replication_role = replica; DELETE FROM ledger;")
	d.refusedWith(t, pgtrigger.CodeStale, "", "SET session_replication_role = replica; BEGIN; SET LOCAL termfence.token = :'tok'; DELETE FROM ledger; COMMIT;",
		"tok="+sign(t, key, ep(33, "node-a")))
	d.refusedWith(t, pgtrigger.CodeFenceRegress, "", "SET session_replication_role = replica; UPDATE termfence_fence SET term = 1;")
}

// TestFenceRowOnlyRises: a role that may write the fence table (as Go
// writers through pgfence must) can raise its rows (under the raised
// epoch's token) but never lower, move, delete or truncate them; that
// would reopen the table to old tokens.
func TestFenceRowOnlyRises(t *testing.T) {
	d := guarded(t)
	r := d.role(t)
	d.exec(t, "GRANT USAGE ON SCHEMA "+d.schema+" TO "+r)
	d.exec(t, "GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON termfence_fence TO "+r)
	for _, c := range []struct{ name, script string }{
		{"lower the term", "UPDATE termfence_fence SET term = 33;"},
		{"same term, another leader", "UPDATE termfence_fence SET leader = 'node-x';"},
		{"another cluster", "UPDATE termfence_fence SET cluster = 'billing', term = 99;"},
		{"another resource", "UPDATE termfence_fence SET resource = 'x'::bytea, term = 99;"},
		{"delete", "DELETE FROM termfence_fence;"},
		{"truncate", "TRUNCATE termfence_fence;"},
	} {
		t.Run(c.name, func(t *testing.T) { d.refusedWith(t, pgtrigger.CodeFenceRegress, r, c.script) })
	}
	if h := d.highest(t, "ledger"); h != ep(34, "node-b") {
		t.Fatalf("fence = %v, want payments/34/node-b", h)
	}
	// A raise needs the raised epoch's token (TestFenceRaiseNeedsToken);
	// a row left as it is needs none.
	d.mustPsql(t, r, "BEGIN; SET LOCAL termfence.token = :'tok'; UPDATE termfence_fence SET term = 35, leader = 'node-c'; COMMIT; UPDATE termfence_fence SET term = term;",
		"tok="+sign(t, key, ep(35, "node-c")))
	if h := d.highest(t, "ledger"); h != ep(35, "node-c") {
		t.Fatalf("fence = %v after a raise, want payments/35/node-c", h)
	}
}
