package pgtrigger_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"net/url"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/pgfence"
	"github.com/termfence/termfence/storageguard/pgtrigger"
)

// wedgeTerm is 2^48: a term no real leader reaches, which would lock every
// leader out of the resource if it were written into the fence row.
const wedgeTerm = uint64(1) << 48

// fenceWriter returns the test database with ledger guarded (fence at
// payments/34/node-b) and a role that may write termfence_fence, as Go
// writers through pgfence or sqlfence need, but holds no token.
func fenceWriter(t *testing.T) (*db, string) {
	t.Helper()
	d := guarded(t)
	r := d.role(t)
	d.exec(t, "GRANT USAGE, CREATE ON SCHEMA "+d.schema+" TO "+r)
	d.exec(t, "GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON termfence_fence TO "+r)
	return d, r
}

// TestFenceRaiseNeedsToken: a role that may write termfence_fence cannot
// raise or create a row of a cluster whose key is in the database (HMAC)
// unless the row is exactly the epoch of the token its transaction
// presents; nor create a row of another cluster for a guarded resource.
// Before this, `UPDATE termfence_fence SET term = 2^48` wedged the
// resource: every real leader was refused as stale.
func TestFenceRaiseNeedsToken(t *testing.T) {
	d, r := fenceWriter(t)
	// A second guarded resource that has no fence row yet.
	d.exec(t, "CREATE TABLE ledger2 (id int)")
	cfg := d.config("ledger2")
	cfg.Resource = "ledger2"
	d.install(t, cfg)

	wedge := "UPDATE termfence_fence SET term = " + strconv.FormatUint(wedgeTerm, 10) + ", leader = 'mallory';"
	withTok := func(sql string) string {
		return "BEGIN; SET LOCAL termfence.token = :'tok'; " + sql + " COMMIT;"
	}
	for _, c := range []struct{ name, code, script, tok string }{
		{"wedge without a token", pgtrigger.CodeNoToken, wedge, ""},
		{"wedge with an unsigned token", pgtrigger.CodeUnsigned, withTok(wedge), "payments/" + strconv.FormatUint(wedgeTerm, 10) + "/mallory"},
		{"wedge with a forged token", pgtrigger.CodeBadSignature, withTok(wedge), sign(t, otherKey, ep(wedgeTerm, "mallory"))},
		{"wedge under a current token", pgtrigger.CodeFenceUnverified, withTok(wedge), sign(t, key, ep(35, "node-c"))},
		{"raise under another epoch's token", pgtrigger.CodeFenceUnverified, withTok("UPDATE termfence_fence SET term = 36, leader = 'node-c';"), sign(t, key, ep(35, "node-c"))},
		{"raise to the token's term, another leader", pgtrigger.CodeFenceUnverified, withTok("UPDATE termfence_fence SET term = 35, leader = 'mallory';"), sign(t, key, ep(35, "node-c"))},
		{"a row of the cluster without a token", pgtrigger.CodeNoToken,
			"INSERT INTO termfence_fence VALUES (convert_to('elsewhere', 'UTF8'), 'payments', 99, 'mallory');", ""},
		{"a guarded resource's row for another cluster", pgtrigger.CodeForeign,
			"INSERT INTO termfence_fence VALUES (convert_to('ledger2', 'UTF8'), 'evil', 1, 'mallory');", ""},
		{"the same, under the other cluster's plain token", pgtrigger.CodeForeign,
			withTok("INSERT INTO termfence_fence VALUES (convert_to('ledger2', 'UTF8'), 'evil', 1, 'mallory');"), "evil/1/mallory"},
		{"a guarded resource's row, on conflict", pgtrigger.CodeNoToken,
			"INSERT INTO termfence_fence VALUES (convert_to('ledger', 'UTF8'), 'payments', 99, 'mallory') ON CONFLICT (resource) DO UPDATE SET term = 99;", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var vars []string
			if c.tok != "" {
				vars = append(vars, "tok="+c.tok)
			}
			d.refusedWith(t, c.code, r, c.script, vars...)
		})
	}
	if h := d.highest(t, "ledger"); h != ep(34, "node-b") {
		t.Fatalf("fence = %v after the refused writes, want payments/34/node-b", h)
	}
	if n := d.count(t, "SELECT count(*) FROM termfence_fence WHERE resource <> convert_to('ledger', 'UTF8')"); n != 0 {
		t.Fatalf("%d rows were created without a token", n)
	}
	// The next leader is not locked out: it writes through the guard.
	d.mustPsql(t, "", "BEGIN; SET LOCAL termfence.token = :'tok'; INSERT INTO ledger VALUES (36, 'by 36'); COMMIT;", "tok="+sign(t, key, ep(36, "node-a")))

	// A raise that is exactly the presented epoch goes through, a row
	// unchanged needs no token, and so does a raise by the table's owner
	// (the guard's own, among others).
	d.mustPsql(t, r, withTok("UPDATE termfence_fence SET term = 37, leader = 'node-c' WHERE resource = convert_to('ledger', 'UTF8');"), "tok="+sign(t, key, ep(37, "node-c")))
	d.mustPsql(t, r, withTok("INSERT INTO termfence_fence VALUES (convert_to('ledger2', 'UTF8'), 'payments', 37, 'node-c');"), "tok="+sign(t, key, ep(37, "node-c")))
	d.mustPsql(t, r, "UPDATE termfence_fence SET term = term;")
	if h := d.highest(t, "ledger"); h != ep(37, "node-c") {
		t.Fatalf("fence = %v, want payments/37/node-c", h)
	}
	d.exec(t, "UPDATE termfence_fence SET term = 38, leader = 'node-d' WHERE resource = convert_to('ledger', 'UTF8')")
}

// TestFenceRaiseKeylessCluster: a cluster whose key is not in the database
// (Ed25519 tokens, which PostgreSQL cannot verify) gets what it had: its
// rows only rise, and a guarded resource's row belongs to the guard's
// cluster. A role that may write the fence table can still raise such a
// cluster's rows to any term: grant fence-table writes only to the roles
// its leaders write with (Audit lists them).
func TestFenceRaiseKeylessCluster(t *testing.T) {
	d, r := fenceWriter(t)
	d.mustPsql(t, r, "INSERT INTO termfence_fence VALUES (convert_to('edge-res', 'UTF8'), 'edge', 5, 'n1');")
	d.mustPsql(t, r, "UPDATE termfence_fence SET term = 6, leader = 'n2' WHERE cluster = 'edge';")
	d.refusedWith(t, pgtrigger.CodeFenceRegress, r, "UPDATE termfence_fence SET term = 5 WHERE cluster = 'edge';")
	d.refusedWith(t, pgtrigger.CodeFenceRegress, r, "DELETE FROM termfence_fence WHERE cluster = 'edge';")
	// An Ed25519 token is no token here: it cannot raise an HMAC cluster's
	// row.
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	edTok, err := epoch.NewEd25519Signer(priv).Sign(ep(35, "node-c"))
	if err != nil {
		t.Fatal(err)
	}
	d.refusedWith(t, pgtrigger.CodeBadSignature, r, "BEGIN; SET LOCAL termfence.token = :'tok'; UPDATE termfence_fence SET term = 35, leader = 'node-c' WHERE resource = convert_to('ledger', 'UTF8'); COMMIT;", "tok="+edTok)
	var term int64
	if err := d.pool.QueryRow(context.Background(), "SELECT term FROM termfence_fence WHERE cluster = 'edge'").Scan(&term); err != nil || term != 6 {
		t.Fatalf("edge row term = %d (%v), want 6", term, err)
	}
}

// TestPgfenceRaiseAsFenceWriter: pgfence in a role that may write the
// fence table but does not own it raises an HMAC cluster's row only when
// it presents the epoch's token (pgfence.Options.Signer); without it the
// raise is refused and the row stays where it was.
func TestPgfenceRaiseAsFenceWriter(t *testing.T) {
	d, r := fenceWriter(t)
	ctx := context.Background()
	u, err := url.Parse(d.dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(r)
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	bare, err := pgfence.Open(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	err = bare.Admit(ctx, "ledger", ep(35, "node-c"))
	if !errors.Is(pgtrigger.Refusal(err), storageguard.ErrUnauthenticated) {
		t.Fatalf("pgfence raise without a token = %v, want the guard's refusal (no token)", err)
	}
	// A raise past the presented epoch, seen from Go.
	tx, err := pgtrigger.Begin(ctx, pool, sign(t, key, ep(35, "node-c")))
	if err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, "UPDATE termfence_fence SET term = 36, leader = 'node-c'")
	tx.Rollback(ctx)
	if sqlState(err) != pgtrigger.CodeFenceUnverified || !errors.Is(pgtrigger.Refusal(err), storageguard.ErrUnauthenticated) {
		t.Fatalf("raise past the token = %v, want %s matching ErrUnauthenticated", err, pgtrigger.CodeFenceUnverified)
	}
	codec, err := epoch.NewHMAC(key)
	if err != nil {
		t.Fatal(err)
	}
	signed, err := pgfence.OpenWith(ctx, pool, pgfence.Options{Signer: codec})
	if err != nil {
		t.Fatal(err)
	}
	defer signed.Close()
	if err := signed.Admit(ctx, "ledger", ep(35, "node-c")); err != nil {
		t.Fatalf("pgfence raise with the token: %v", err)
	}
	if err := signed.Admit(ctx, "fresh", ep(35, "node-c")); err != nil {
		t.Fatalf("pgfence first epoch of a resource with the token: %v", err)
	}
	if h := d.highest(t, "ledger"); h != ep(35, "node-c") {
		t.Fatalf("fence = %v, want payments/35/node-c", h)
	}
	// The signed Tx presents the token to the guard too: its writes to a
	// guarded table need no pgtrigger.Present.
	d.exec(t, "GRANT INSERT ON ledger TO "+r)
	err = signed.Tx(ctx, "ledger", ep(35, "node-c"), func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO ledger VALUES (35, 'by pgfence, signed')")
		return err
	})
	if err != nil {
		t.Fatalf("signed pgfence.Tx writing the guarded table: %v", err)
	}
}
