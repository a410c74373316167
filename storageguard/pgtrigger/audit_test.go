package pgtrigger_test

import (
	"context"
	"strings"
	"testing"

	"github.com/termfence/termfence/storageguard/pgtrigger"
)

// audit runs Audit on table and drops the superusers it reports (the
// server's own, which every test would otherwise see).
func (d *db) audit(t *testing.T, table string) []pgtrigger.Weakness {
	t.Helper()
	ws, err := pgtrigger.Audit(context.Background(), d.pool, table)
	if err != nil {
		t.Fatalf("Audit(%s): %v", table, err)
	}
	var out []pgtrigger.Weakness
	for _, w := range ws {
		if w.Kind == pgtrigger.WeakOwnership && w.Relation == "" && strings.Contains(w.What, "superuser") {
			continue
		}
		out = append(out, w)
	}
	return out
}

// TestAudit creates each weakness Audit knows on a guarded, partitioned
// table and sees it reported, with the role and relation concerned.
func TestAudit(t *testing.T) {
	d := newDB(t)
	d.exec(t, `CREATE TABLE ledger (id int, note text) PARTITION BY RANGE (id);
CREATE TABLE ledger_a PARTITION OF ledger FOR VALUES FROM (0) TO (100);
CREATE TABLE ledger_o PARTITION OF ledger FOR VALUES FROM (100) TO (200)`)
	d.install(t, d.config("ledger"))
	if ws := d.audit(t, "ledger"); len(ws) != 0 {
		t.Fatalf("a fresh install: Audit = %v, want nothing", ws)
	}
	cfg := d.config("ledger")
	cfg.AllowPlain = true
	d.install(t, cfg)

	trig, owner, member, reader, writer := d.role(t), d.role(t), d.role(t), d.role(t), d.role(t)
	d.exec(t, "GRANT TRIGGER ON ledger_a TO "+trig)
	d.exec(t, "GRANT "+owner+" TO "+member)
	d.exec(t, "ALTER TABLE ledger_o OWNER TO "+owner)
	d.exec(t, "GRANT pg_read_all_data TO "+reader)
	d.exec(t, "GRANT INSERT, UPDATE ON termfence_fence TO "+writer)
	d.exec(t, "CREATE TABLE ledger_late PARTITION OF ledger FOR VALUES FROM (200) TO (300)")
	d.exec(t, `CREATE FUNCTION later() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$;
CREATE TRIGGER later AFTER INSERT ON ledger FOR EACH STATEMENT EXECUTE FUNCTION later()`)

	ws := d.audit(t, "ledger")
	for _, want := range []struct {
		kind      pgtrigger.WeaknessKind
		role, rel string // substrings; "" matches anything
	}{
		{pgtrigger.WeakAllowPlain, "", "ledger"},
		{pgtrigger.WeakTrigger, trig, "ledger_a"},
		{pgtrigger.WeakOwnership, owner, "ledger_o"},
		{pgtrigger.WeakOwnership, member, "ledger_o"},
		{pgtrigger.WeakReadAllData, reader, ""},
		{pgtrigger.WeakFenceWrite, writer, "termfence_fence"},
		{pgtrigger.WeakUnguarded, "", "ledger_late"},
		{pgtrigger.WeakUnapprovedTrigger, "", "ledger"},
	} {
		found := false
		for _, w := range ws {
			if w.Kind == want.kind && strings.Contains(w.Role, want.role) && strings.Contains(w.Relation, want.rel) && w.What != "" {
				found = true
			}
		}
		if !found {
			t.Errorf("Audit does not report %s (role %q, relation %q):\n%v", want.kind, want.role, want.rel, ws)
		}
	}
	if t.Failed() {
		return
	}
	for _, w := range ws {
		t.Log(w)
	}
	d.exec(t, "CREATE TABLE plain (id int)")
	ws, err := pgtrigger.Audit(context.Background(), d.pool, "plain")
	if err != nil || len(ws) != 1 || ws[0].Kind != pgtrigger.WeakUnguarded {
		t.Fatalf("Audit of a table without a guard = %v, %v; want one unguarded", ws, err)
	}
}
