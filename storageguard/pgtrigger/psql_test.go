package pgtrigger_test

import (
	"crypto/ed25519"
	"strconv"
	"strings"
	"testing"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard/pgtrigger"
)

// These tests drive the guarded table with the psql binary, as a batch job
// or an operator would: the check is the database's, whatever the client.

// guarded makes table ledger(id, note) guarded for resource "ledger", with
// the fence raised to 34 by node-b, and returns the test database.
func guarded(t *testing.T) *db {
	t.Helper()
	d := newDB(t)
	d.exec(t, "CREATE TABLE ledger (id int PRIMARY KEY, note text NOT NULL)")
	d.install(t, d.config("ledger"))
	d.mustPsql(t, "", "BEGIN; SET LOCAL termfence.token = :'tok'; INSERT INTO ledger VALUES (1, 'first'); COMMIT;",
		"tok="+sign(t, key, ep(34, "node-b")))
	if h := d.highest(t, "ledger"); h != ep(34, "node-b") {
		t.Fatalf("fence after the first write = %v, want payments/34/node-b", h)
	}
	return d
}

// TestPsqlNoToken: every kind of write without a token is refused with
// CodeNoToken and changes nothing.
func TestPsqlNoToken(t *testing.T) {
	d := guarded(t)
	for _, stmt := range []string{
		"INSERT INTO ledger VALUES (2, 'x');",
		"UPDATE ledger SET note = 'x';",
		"UPDATE ledger SET note = 'x' WHERE false;", // no row: still a write statement
		"DELETE FROM ledger;",
		"TRUNCATE ledger;",
		"INSERT INTO ledger VALUES (1, 'x') ON CONFLICT (id) DO UPDATE SET note = 'x';",
		"WITH gone AS (DELETE FROM ledger RETURNING id) SELECT count(*) FROM gone;",
		"MERGE INTO ledger l USING (SELECT 1 AS id) s ON l.id = s.id WHEN MATCHED THEN UPDATE SET note = 'x';",
		"COPY ledger FROM STDIN;\n5\tcopied\n\\.\n",
		// An empty token is no token; so is one set only for another
		// transaction.
		"BEGIN; SET LOCAL termfence.token = ''; DELETE FROM ledger; COMMIT;",
		"BEGIN; SET LOCAL termfence.token = :'tok'; COMMIT; DELETE FROM ledger;",
	} {
		msg := d.refusedWith(t, pgtrigger.CodeNoToken, "", stmt, "tok="+sign(t, key, ep(34, "node-b"))).stderr
		if !strings.Contains(msg, "termfence: no token") || !strings.Contains(msg, "SET LOCAL termfence.token") {
			t.Errorf("%s: message does not say what is missing and how to present it:\n%s", stmt, msg)
		}
	}
	if n := d.count(t, "SELECT count(*) FROM ledger WHERE id = 1 AND note = 'first'"); n != 1 || d.count(t, "SELECT count(*) FROM ledger") != 1 {
		t.Fatal("a refused write changed the table")
	}
}

// TestPsqlTokens: one psql transaction per token; only the current epoch's
// (and a newer one's) writes commit, every other token fails with its
// SQLSTATE and a message naming what was presented and, once the token is
// authentic, the highest epoch.
func TestPsqlTokens(t *testing.T) {
	d := guarded(t)
	_, edPriv, _ := ed25519.GenerateKey(nil)
	edTok, _ := epoch.NewEd25519Signer(edPriv).Sign(ep(35, "node-c"))
	cur := sign(t, key, ep(34, "node-b"))
	hs := func(text string) string { return handSign(key, text) }
	for _, c := range []struct {
		name, token, code string
		says              []string // the message must contain each
	}{
		{"current", cur, "", nil},
		{"stale", sign(t, key, ep(33, "node-a")), pgtrigger.CodeStale, []string{"stale epoch", "presented payments/33/node-a", "highest payments/34/node-b", `"ledger"`}},
		{"conflict", sign(t, key, ep(34, "node-x")), pgtrigger.CodeConflict, []string{"presented payments/34/node-x", "highest payments/34/node-b"}},
		{"foreign", sign(t, key, epoch.Epoch{Cluster: "billing", Term: 99, Leader: "n1"}), pgtrigger.CodeForeign, []string{"billing/99/n1", "another cluster than payments"}},
		{"forged", sign(t, otherKey, ep(99, "mallory")), pgtrigger.CodeBadSignature, []string{"bad signature"}},
		{"signature changed", cur[:len(cur)-1] + "A", pgtrigger.CodeBadSignature, []string{"bad signature"}},
		{"text changed", strings.Replace(cur, "/34/", "/99/", 1), pgtrigger.CodeBadSignature, nil},
		{"ed25519", edTok, pgtrigger.CodeBadSignature, []string{"ed25519", "hs256"}},
		{"unknown algorithm", "tf1:hs512:payments/99/m:AAAA", pgtrigger.CodeBadSignature, nil},
		{"unsigned", "payments/99/mallory", pgtrigger.CodeUnsigned, []string{"unsigned token payments/99/mallory"}},
		{"garbage", "hello", pgtrigger.CodeMalformed, nil},
		{"unknown version", "tf2:hs256:payments/99/m:sig", pgtrigger.CodeMalformed, []string{"unknown token version"}},
		{"no signature", "tf1:hs256:payments/99/m", pgtrigger.CodeMalformed, nil},
		{"oversized", hs("payments/35/" + strings.Repeat("n", 1100)), pgtrigger.CodeMalformed, []string{"more than 1024"}},
		{"term 0", hs("payments/0/node-b"), pgtrigger.CodeMalformed, []string{"term is 0"}},
		{"term leading zero", hs("payments/035/node-b"), pgtrigger.CodeMalformed, nil},
		{"term above the bound", hs("payments/" + pgtriggerMaxTermPlus(1) + "/node-b"), pgtrigger.CodeMalformed, []string{"above the highest valid term"}},
		{"term 2^64", hs("payments/18446744073709551616/node-b"), pgtrigger.CodeMalformed, nil},
		{"name too long", hs("payments/35/" + strings.Repeat("n", 65)), pgtrigger.CodeMalformed, nil},
		{"bad name byte", hs("payments/35/node b"), pgtrigger.CodeMalformed, nil},
		{"newer", sign(t, key, ep(35, "node-c")), "", nil},
		{"stale after raise", cur, pgtrigger.CodeStale, []string{"presented payments/34/node-b", "highest payments/35/node-c"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := d.highest(t, "ledger")
			n := d.count(t, "SELECT count(*) FROM ledger")
			script := "BEGIN; SET LOCAL termfence.token = :'tok'; INSERT INTO ledger VALUES (100 + :n, 'x'); COMMIT;"
			vars := []string{"tok=" + c.token, "n=" + strconv.Itoa(n)}
			if c.code == "" {
				d.mustPsql(t, "", script, vars...)
				if got := d.count(t, "SELECT count(*) FROM ledger"); got != n+1 {
					t.Fatalf("accepted write did not commit: %d rows, want %d", got, n+1)
				}
				return
			}
			msg := d.refusedWith(t, c.code, "", script, vars...).stderr
			for _, s := range c.says {
				if !strings.Contains(msg, s) {
					t.Errorf("message lacks %q:\n%s", s, msg)
				}
			}
			if got := d.count(t, "SELECT count(*) FROM ledger"); got != n {
				t.Fatalf("refused write changed the table: %d rows, want %d", got, n)
			}
			if h := d.highest(t, "ledger"); h != before {
				t.Fatalf("refused token moved the fence from %v to %v", before, h)
			}
		})
	}
}

// maxTerm is the highest term the guard accepts.
const maxTerm uint64 = epoch.MaxTerm

// pgtriggerMaxTermPlus is the guard's term bound plus n, in decimal.
func pgtriggerMaxTermPlus(n uint64) string {
	return strconv.FormatUint(maxTerm+n, 10)
}

// TestPsqlStaleMultiStatement: a transaction whose token is stale commits
// nothing, not even its writes to unguarded tables before the refused one;
// with psql's ON_ERROR_ROLLBACK (a savepoint around each statement) the
// unguarded writes commit but no guarded one does.
func TestPsqlStaleMultiStatement(t *testing.T) {
	d := guarded(t)
	d.exec(t, "CREATE TABLE audit (what text)")
	stale := "tok=" + sign(t, key, ep(33, "node-a"))
	script := `BEGIN;
SET LOCAL termfence.token = :'tok';
INSERT INTO audit VALUES ('before');
INSERT INTO ledger VALUES (2, 'stale');
UPDATE ledger SET note = 'stale';
INSERT INTO audit VALUES ('after');
COMMIT;`
	d.refusedWith(t, pgtrigger.CodeStale, "", script, stale)
	// Without ON_ERROR_STOP psql goes on: the rest fails in the aborted
	// transaction and COMMIT rolls back.
	r := d.psql(t, "", script, stale, "ON_ERROR_STOP=0")
	if s := r.states(); len(s) < 2 || s[0] != pgtrigger.CodeStale || s[1] != "25P02" {
		t.Fatalf("SQLSTATEs %v, want %s then 25P02 (transaction aborted):\n%s", s, pgtrigger.CodeStale, r.stderr)
	}
	if n := d.count(t, "SELECT count(*) FROM audit"); n != 0 {
		t.Fatalf("%d unguarded rows of the refused transaction committed", n)
	}
	r = d.psql(t, "", script, stale, "ON_ERROR_STOP=0", "ON_ERROR_ROLLBACK=on")
	if s := r.states(); len(s) != 2 || s[0] != pgtrigger.CodeStale || s[1] != pgtrigger.CodeStale {
		t.Fatalf("ON_ERROR_ROLLBACK: SQLSTATEs %v, want two %s:\n%s", s, pgtrigger.CodeStale, r.stderr)
	}
	if n := d.count(t, "SELECT count(*) FROM ledger WHERE note = 'stale' OR id = 2"); n != 0 {
		t.Fatalf("%d guarded rows of a stale transaction committed", n)
	}
	// The same transaction with the current token commits all of it.
	d.mustPsql(t, "", script, "tok="+sign(t, key, ep(34, "node-b")))
	if n := d.count(t, "SELECT count(*) FROM ledger WHERE note = 'stale'"); n != 2 {
		t.Fatalf("current-token transaction: %d rows updated, want 2", n)
	}
}
