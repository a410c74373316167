package pgtrigger_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/internal/sqltest"
	"github.com/termfence/termfence/storageguard/pgfence"
	"github.com/termfence/termfence/storageguard/pgtrigger"
)

func TestConfigValidate(t *testing.T) {
	good := pgtrigger.Config{Table: "ledger", Resource: "ledger", Cluster: "payments", HMACKey: key}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for name, mut := range map[string]func(*pgtrigger.Config){
		"no table":         func(c *pgtrigger.Config) { c.Table = "" },
		"NUL in table":     func(c *pgtrigger.Config) { c.Table = "a\x00b" },
		"long table":       func(c *pgtrigger.Config) { c.Table = strings.Repeat("t", 200) },
		"no resource":      func(c *pgtrigger.Config) { c.Resource = "" },
		"long resource":    func(c *pgtrigger.Config) { c.Resource = strings.Repeat("r", storageguard.MaxResourceLen+1) },
		"NUL in resource":  func(c *pgtrigger.Config) { c.Resource = "a\x00" },
		"non-UTF-8":        func(c *pgtrigger.Config) { c.Resource = "\xff" },
		"no cluster":       func(c *pgtrigger.Config) { c.Cluster = "" },
		"bad cluster":      func(c *pgtrigger.Config) { c.Cluster = "pay ments" },
		"short key":        func(c *pgtrigger.Config) { c.HMACKey = key[:31] },
		"empty key":        func(c *pgtrigger.Config) { c.HMACKey = []byte{} },
		"long schema":      func(c *pgtrigger.Config) { c.Schema = strings.Repeat("s", 64) },
		"NUL in schema":    func(c *pgtrigger.Config) { c.Schema = "s\x00" },
		"non-UTF-8 schema": func(c *pgtrigger.Config) { c.Schema = "\xfe" },
		"empty key ID":     func(c *pgtrigger.Config) { c.HMACKeys = map[string][]byte{"": key} },
		"key ID of 33":     func(c *pgtrigger.Config) { c.HMACKeys = map[string][]byte{strings.Repeat("i", 33): key} },
		"dot in key ID":    func(c *pgtrigger.Config) { c.HMACKeys = map[string][]byte{"a.b": key} },
		"short ID'd key":   func(c *pgtrigger.Config) { c.HMACKeys = map[string][]byte{"k1": key[:31]} },
	} {
		c := good
		mut(&c)
		if err := c.Validate(); !errors.Is(err, storageguard.ErrBadConfig) {
			t.Errorf("%s: Validate = %v, want ErrBadConfig", name, err)
		}
	}
	if err := pgtrigger.Install(context.Background(), nil, good); err == nil {
		t.Error("Install(nil pool) succeeded")
	}
	if err := pgtrigger.Uninstall(context.Background(), nil, "ledger"); err == nil {
		t.Error("Uninstall(nil pool) succeeded")
	}
	if _, err := pgtrigger.Begin(context.Background(), nil, "t"); err == nil {
		t.Error("Begin(nil pool) succeeded")
	}
	if err := pgtrigger.Present(context.Background(), nil, "t"); err == nil {
		t.Error("Present(nil tx) succeeded")
	}
}

// TestInstallUninstall: Install is idempotent, Uninstall opens the table
// again with one call and is idempotent too, and a second Install guards
// it again with the high-water mark where it was.
func TestInstallUninstall(t *testing.T) {
	d := guarded(t)
	ctx := context.Background()
	d.install(t, d.config("ledger")) // again
	if n := d.count(t, "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'ledger'::regclass AND tgname = $1 AND tgenabled = 'A'", pgtrigger.TriggerName); n != 1 {
		t.Fatalf("%d enabled-always guard triggers on ledger after a second Install, want 1", n)
	}
	d.refusedWith(t, pgtrigger.CodeNoToken, "", "DELETE FROM ledger;")
	for range 2 {
		if err := pgtrigger.Uninstall(ctx, d.pool, "ledger"); err != nil {
			t.Fatal(err)
		}
	}
	d.mustPsql(t, "", "INSERT INTO ledger VALUES (2, 'unguarded');")
	d.install(t, d.config("ledger"))
	d.refusedWith(t, pgtrigger.CodeStale, "", "BEGIN; SET LOCAL termfence.token = :'tok'; DELETE FROM ledger; COMMIT;", "tok="+sign(t, key, ep(33, "node-a")))
	if err := pgtrigger.Uninstall(ctx, d.pool, "no_such_table"); !errors.Is(err, storageguard.ErrBadConfig) {
		t.Fatalf("Uninstall(missing table) = %v, want ErrBadConfig", err)
	}
}

// TestInstallTree: a partitioned table and a table with inheritance
// children are guarded as a whole: a write straight into a partition or a
// child is refused too (a statement trigger on the parent alone would not
// see it). A partition added later is unguarded until Install runs again.
func TestInstallTree(t *testing.T) {
	d := newDB(t)
	d.exec(t, `CREATE TABLE events (id int, note text) PARTITION BY RANGE (id);
CREATE TABLE events_low PARTITION OF events FOR VALUES FROM (0) TO (100) PARTITION BY RANGE (id);
CREATE TABLE events_low_a PARTITION OF events_low FOR VALUES FROM (0) TO (50);
CREATE TABLE events_high PARTITION OF events FOR VALUES FROM (100) TO (200);
CREATE TABLE base (id int);
CREATE TABLE derived () INHERITS (base)`)
	d.install(t, d.config("events"))
	d.install(t, d.config("base"))
	for _, stmt := range []string{
		"INSERT INTO events VALUES (1, 'x');",
		"INSERT INTO events_low_a VALUES (1, 'x');",
		"INSERT INTO events_high VALUES (150, 'x');",
		"TRUNCATE events_low;",
		"INSERT INTO derived VALUES (1);",
		"DELETE FROM ONLY base;",
	} {
		d.refusedWith(t, pgtrigger.CodeNoToken, "", stmt)
	}
	tok := "tok=" + sign(t, key, ep(5, "n1"))
	d.mustPsql(t, "", "BEGIN; SET LOCAL termfence.token = :'tok'; INSERT INTO events_low_a VALUES (1, 'x'); INSERT INTO derived VALUES (1); COMMIT;", tok)
	d.exec(t, "CREATE TABLE events_late PARTITION OF events FOR VALUES FROM (200) TO (300)")
	d.mustPsql(t, "", "INSERT INTO events_late VALUES (250, 'unguarded until Install runs again');")
	d.install(t, d.config("events"))
	d.refusedWith(t, pgtrigger.CodeNoToken, "", "INSERT INTO events_late VALUES (251, 'x');")
	if err := pgtrigger.Uninstall(context.Background(), d.pool, "events"); err != nil {
		t.Fatal(err)
	}
	if n := d.count(t, "SELECT count(*) FROM pg_trigger WHERE tgname = $1 AND tgrelid::regclass::text LIKE 'events%'", pgtrigger.TriggerName); n != 0 {
		t.Fatalf("%d guard triggers left in the events tree after Uninstall", n)
	}
	d.mustPsql(t, "", "INSERT INTO events_low_a VALUES (2, 'x');")
}

// TestInstallRefuses: what Install will not do, each with its error and
// without changing the table.
func TestInstallRefuses(t *testing.T) {
	d := newDB(t)
	ctx := context.Background()
	d.exec(t, "CREATE TABLE ledger (id int); CREATE VIEW ledger_view AS SELECT * FROM ledger")
	for _, c := range []struct {
		name string
		cfg  func() pgtrigger.Config
		want error
	}{
		{"missing table", func() pgtrigger.Config { return d.config("nope") }, storageguard.ErrBadConfig},
		{"a view", func() pgtrigger.Config { return d.config("ledger_view") }, storageguard.ErrBadConfig},
		{"the fence table", func() pgtrigger.Config { return d.config("termfence_fence") }, storageguard.ErrBadConfig},
		{"no key", func() pgtrigger.Config { c := d.config("ledger"); c.HMACKey = nil; return c }, pgtrigger.ErrNoKey},
		{"invalid config", func() pgtrigger.Config { c := d.config("ledger"); c.Cluster = ""; return c }, storageguard.ErrBadConfig},
	} {
		if err := pgtrigger.Install(ctx, d.pool, c.cfg()); !errors.Is(err, c.want) {
			t.Errorf("%s: Install = %v, want %v", c.name, err, c.want)
		}
	}
	if n := d.count(t, "SELECT count(*) FROM pg_trigger WHERE tgname = $1 AND tgrelid = 'ledger'::regclass", pgtrigger.TriggerName); n != 0 {
		t.Fatal("a refused Install left a trigger")
	}

	// One private schema serves one fence table: a second schema's fence
	// table needs its own.
	d.install(t, d.config("ledger"))
	other := newDB(t)
	other.exec(t, "CREATE TABLE ledger (id int)")
	cfg := other.config("ledger")
	cfg.Schema = d.private
	if err := pgtrigger.Install(ctx, other.pool, cfg); !errors.Is(err, storageguard.ErrBadConfig) || !strings.Contains(err.Error(), "use another Config.Schema") {
		t.Fatalf("Install with another fence table into a used private schema = %v, want ErrBadConfig", err)
	}
}

// TestInstallUnsafe: Install refuses to rely on objects another role owns
// or can reach: a private schema created beforehand by someone else (who
// would own the guard's functions and could read the key), one that grants
// privileges to others, and a fence table owned by another role (which
// could lower its rows).
func TestInstallUnsafe(t *testing.T) {
	ctx := context.Background()
	t.Run("squatted schema", func(t *testing.T) {
		d := newDB(t)
		d.exec(t, "CREATE TABLE ledger (id int)")
		r := d.role(t)
		d.exec(t, "CREATE SCHEMA "+d.private+" AUTHORIZATION "+r)
		if err := pgtrigger.Install(ctx, d.pool, d.config("ledger")); !errors.Is(err, pgtrigger.ErrUnsafe) || !strings.Contains(err.Error(), r) {
			t.Fatalf("Install into a schema owned by %s = %v, want ErrUnsafe naming the role", r, err)
		}
	})
	t.Run("schema shared", func(t *testing.T) {
		d := newDB(t)
		d.exec(t, "CREATE TABLE ledger (id int)")
		d.install(t, d.config("ledger"))
		r := d.role(t)
		d.exec(t, "GRANT USAGE ON SCHEMA "+d.private+" TO "+r)
		if err := pgtrigger.Install(ctx, d.pool, d.config("ledger")); !errors.Is(err, pgtrigger.ErrUnsafe) || !strings.Contains(err.Error(), r) {
			t.Fatalf("Install with USAGE granted to %s = %v, want ErrUnsafe", r, err)
		}
		d.exec(t, "REVOKE USAGE ON SCHEMA "+d.private+" FROM "+r)
		d.exec(t, "GRANT SELECT ON "+d.private+".hmac_key TO "+r)
		if err := pgtrigger.Install(ctx, d.pool, d.config("ledger")); !errors.Is(err, pgtrigger.ErrUnsafe) {
			t.Fatalf("Install with the key table granted to %s = %v, want ErrUnsafe", r, err)
		}
	})
	t.Run("default privileges", func(t *testing.T) {
		d := newDB(t)
		d.exec(t, "CREATE TABLE ledger (id int)")
		r := d.role(t)
		d.exec(t, "ALTER DEFAULT PRIVILEGES GRANT SELECT ON TABLES TO "+r)
		t.Cleanup(func() {
			p, err := pgxpool.New(context.Background(), os.Getenv(sqltest.PostgresEnv))
			if err == nil {
				p.Exec(context.Background(), "ALTER DEFAULT PRIVILEGES REVOKE SELECT ON TABLES FROM "+r)
				p.Close()
			}
		})
		if err := pgtrigger.Install(ctx, d.pool, d.config("ledger")); !errors.Is(err, pgtrigger.ErrUnsafe) {
			t.Fatalf("Install with default privileges for %s = %v, want ErrUnsafe", r, err)
		}
	})
	t.Run("fence table of another role", func(t *testing.T) {
		d := newDB(t)
		d.exec(t, "CREATE TABLE ledger (id int)")
		if _, err := pgfence.Open(ctx, d.pool); err != nil {
			t.Fatal(err)
		}
		r := d.role(t)
		d.exec(t, "ALTER TABLE termfence_fence OWNER TO "+r)
		if err := pgtrigger.Install(ctx, d.pool, d.config("ledger")); !errors.Is(err, pgtrigger.ErrUnsafe) || !strings.Contains(err.Error(), "fence table") {
			t.Fatalf("Install over a fence table owned by %s = %v, want ErrUnsafe", r, err)
		}
	})
}

// TestInstallCreatesPgcrypto: in a database without pgcrypto, Install
// creates it in schema public — not in the application's schema, though
// that is the current one — and the guard works. Then the first guard's
// schema is dropped with CASCADE, as an application drops its own: the
// guard of the other schema still verifies tokens. (CI saw the failure
// this pins: the example's scenario store, the first to install in a fresh
// database, created pgcrypto in its throwaway schema and dropped it at
// exit; every other guard's writes then failed with "schema … does not
// exist".) A database of its own, so that the extension's fate there
// disturbs no other test.
func TestInstallCreatesPgcrypto(t *testing.T) {
	base := os.Getenv(sqltest.PostgresEnv)
	if base == "" {
		t.Skipf("PostgreSQL tests skipped: set %s", sqltest.PostgresEnv)
	}
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	name := "tf_db_" + randHex(5)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), base)
		if err == nil {
			c.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)")
			c.Close(context.Background())
		}
	})
	// guarded opens a pool whose current schema is schema and guards its
	// ledger, with a private schema of its own.
	guarded := func(schema string) *pgxpool.Pool {
		u, _ := url.Parse(base)
		u.Path = "/" + name
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		pool := openPool(t, u.String())
		if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema+"; CREATE TABLE ledger (id int)"); err != nil {
			t.Fatal(err)
		}
		cfg := pgtrigger.Config{Table: "ledger", Resource: "ledger", Cluster: cluster, HMACKey: key, Schema: schema + "_private"}
		if err := pgtrigger.Install(ctx, pool, cfg); err != nil {
			t.Fatal(err)
		}
		return pool
	}
	first := guarded("app_one")
	var where string
	if err := first.QueryRow(ctx, "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pgcrypto'").Scan(&where); err != nil || where != "public" {
		t.Fatalf("pgcrypto installed in schema %q (%v), want public", where, err)
	}
	second := guarded("app_two")
	write := func(pool *pgxpool.Pool, id int) error {
		tx, err := pgtrigger.Begin(ctx, pool, sign(t, key, ep(1, "n1")))
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "INSERT INTO ledger VALUES ($1)", id); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	if err := write(first, 1); err != nil {
		t.Fatalf("a current write to the first guarded table: %v", err)
	}
	_, err = first.Exec(ctx, "INSERT INTO ledger VALUES (2)")
	if !errors.Is(pgtrigger.Refusal(err), storageguard.ErrUnauthenticated) {
		t.Fatalf("write without a token = %v, want a refusal matching ErrUnauthenticated", err)
	}
	if _, err := first.Exec(ctx, "DROP SCHEMA app_one CASCADE; DROP SCHEMA app_one_private CASCADE"); err != nil {
		t.Fatal(err)
	}
	if err := write(second, 3); err != nil {
		t.Fatalf("after another application's schema was dropped, a current write to the second guarded table: %v", err)
	}
}

// TestAllowPlain: with AllowPlain an unsigned token is accepted, and a
// signed one is still verified; without a key every signed token fails.
func TestAllowPlain(t *testing.T) {
	d := newDB(t)
	d.exec(t, "CREATE TABLE ledger (id int); CREATE TABLE other (id int)")
	cfg := d.config("ledger")
	cfg.AllowPlain = true
	cfg.HMACKey = nil
	d.install(t, cfg) // no key needed
	ins := "BEGIN; SET LOCAL termfence.token = :'tok'; INSERT INTO ledger VALUES (1); COMMIT;"
	d.mustPsql(t, "", ins, "tok=payments/7/n1")
	d.refusedWith(t, pgtrigger.CodeBadSignature, "", ins, "tok="+sign(t, key, ep(8, "n1"))) // no key to verify it
	d.refusedWith(t, pgtrigger.CodeStale, "", ins, "tok=payments/6/n1")
	cfg.HMACKey = key
	d.install(t, cfg)
	d.mustPsql(t, "", ins, "tok="+sign(t, key, ep(8, "n1")))
	d.refusedWith(t, pgtrigger.CodeBadSignature, "", ins, "tok="+sign(t, otherKey, ep(9, "n1")))
	// The key is the cluster's: another table installed without one uses
	// it, and signed-only.
	o := d.config("other")
	o.HMACKey = nil
	d.install(t, o)
	d.refusedWith(t, pgtrigger.CodeUnsigned, "", "BEGIN; SET LOCAL termfence.token = :'tok'; INSERT INTO other VALUES (1); COMMIT;", "tok=payments/8/n1")
	d.mustPsql(t, "", "BEGIN; SET LOCAL termfence.token = :'tok'; INSERT INTO other VALUES (1); COMMIT;", "tok="+sign(t, key, ep(8, "n1")))
}

// TestKeyReplaced: Install with a new key replaces the cluster's key:
// tokens under the old one fail from then on.
func TestKeyReplaced(t *testing.T) {
	d := guarded(t)
	cfg := d.config("ledger")
	cfg.HMACKey = otherKey
	d.install(t, cfg)
	ins := "BEGIN; SET LOCAL termfence.token = :'tok'; INSERT INTO ledger VALUES (2, 'x'); COMMIT;"
	d.refusedWith(t, pgtrigger.CodeBadSignature, "", ins, "tok="+sign(t, key, ep(34, "node-b")))
	d.mustPsql(t, "", ins, "tok="+sign(t, otherKey, ep(34, "node-b")))
}

// signID signs e as "tf1:hs256.<id>:..." under k, as a leader holding
// that key ID does.
func signID(k []byte, id string, e epoch.Epoch) string {
	return handSignAlg(k, "hs256."+id, e.String())
}

// TestKeyRotation: a shared secret is rotated with key IDs, psql writing
// throughout: with the old key (no ID) and the new one (ID 2026-12)
// installed, tokens of both verify; with only the new one, the old key's
// tokens, another ID, the new key's signature without its ID or moved to
// another ID, and the old key under the new ID are all refused
// (CodeBadSignature), and the new key's token is accepted.
func TestKeyRotation(t *testing.T) {
	d := guarded(t)
	e := ep(34, "node-b")
	ins := "BEGIN; SET LOCAL termfence.token = :'tok'; INSERT INTO ledger VALUES (nextval('ids'), 'x'); COMMIT;"
	d.exec(t, "CREATE SEQUENCE ids START 100; GRANT USAGE ON SEQUENCE ids TO PUBLIC")
	cfg := d.config("ledger")
	cfg.HMACKey, cfg.HMACKeys = key, map[string][]byte{"2026-12": otherKey}
	d.install(t, cfg)
	d.mustPsql(t, "", ins, "tok="+sign(t, key, e))
	d.mustPsql(t, "", ins, "tok="+signID(otherKey, "2026-12", e))

	cfg.HMACKey = nil
	d.install(t, cfg)
	newTok := signID(otherKey, "2026-12", e)
	for _, tok := range []string{
		sign(t, key, e),                                                // the retired key
		signID(otherKey, "2026-11", e),                                 // an ID not installed
		signID(key, "2026-12", e),                                      // the old key under the new ID
		sign(t, otherKey, e),                                           // the new key without its ID
		strings.Replace(newTok, "hs256.2026-12:", "hs256:", 1),         // the ID removed
		strings.Replace(newTok, "hs256.2026-12:", "hs256.2026-11:", 1), // moved to another ID
	} {
		d.refusedWith(t, pgtrigger.CodeBadSignature, "", ins, "tok="+tok)
	}
	d.mustPsql(t, "", ins, "tok="+newTok)
	if n := d.count(t, "SELECT count(*) FROM ledger"); n != 4 {
		t.Fatalf("%d rows, want 4: the first, two during the rotation, one after", n)
	}
}

// TestRefusalFromGo: a Go writer sees the guard's refusals as
// storageguard's and epoch's errors, with the epochs the guard named.
func TestRefusalFromGo(t *testing.T) {
	d := guarded(t)
	ctx := context.Background()
	write := func(token string) error {
		tx, err := pgtrigger.Begin(ctx, d.pool, token)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "UPDATE ledger SET note = 'go'"); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	if err := write(sign(t, key, ep(34, "node-b"))); err != nil {
		t.Fatalf("current token: %v", err)
	}
	err := pgtrigger.Refusal(write(sign(t, key, ep(33, "node-a"))))
	var se *storageguard.StaleError
	if !errors.As(err, &se) || se.Resource != "ledger" || se.Presented != ep(33, "node-a") || se.Highest != ep(34, "node-b") {
		t.Fatalf("stale: Refusal = %#v (%v), want StaleError naming ledger, 33 and 34", se, err)
	}
	var ce *storageguard.ConflictError
	if err := pgtrigger.Refusal(write(sign(t, key, ep(34, "node-x")))); !errors.As(err, &ce) || ce.Highest != ep(34, "node-b") {
		t.Fatalf("conflict: Refusal = %v", err)
	}
	var fe *storageguard.ForeignError
	if err := pgtrigger.Refusal(write(sign(t, key, epoch.Epoch{Cluster: "billing", Term: 40, Leader: "b"}))); !errors.As(err, &fe) || fe.Cluster != cluster || fe.Presented.Cluster != "billing" {
		t.Fatalf("foreign: Refusal = %v (%#v)", err, fe)
	}
	for _, c := range []struct {
		token string
		want  []error
	}{
		{"", []error{storageguard.ErrUnauthenticated}},
		{"payments/35/n", []error{storageguard.ErrUnauthenticated, epoch.ErrUnsigned}},
		{sign(t, otherKey, ep(35, "n")), []error{storageguard.ErrUnauthenticated, epoch.ErrBadSignature}},
		{"tf1:hs256:payments/35/n", []error{epoch.ErrMalformed}},
	} {
		err := pgtrigger.Refusal(write(c.token))
		for _, w := range c.want {
			if !errors.Is(err, w) {
				t.Errorf("token %q: Refusal = %v, want it to match %v", c.token, err, w)
			}
		}
		if sqlState(err) == "" {
			t.Errorf("token %q: the PostgreSQL error is not reachable from %v", c.token, err)
		}
	}
	if pgtrigger.Refusal(nil) != nil || pgtrigger.Refusal(errors.New("x")) != nil {
		t.Fatal("Refusal of a non-refusal is not nil")
	}
	// Begin with a context that has ended fails and leaves no connection
	// held (the pool is closed at cleanup; goleak checks the rest).
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := pgtrigger.Begin(cctx, d.pool, sign(t, key, ep(34, "node-b"))); err == nil {
		t.Fatal("Begin with a cancelled context succeeded")
	}
	if s := d.pool.Stat(); s.AcquiredConns() != 0 {
		t.Fatalf("%d connections still acquired after a failed Begin", s.AcquiredConns())
	}
}

// TestBeginNeverSplicesHostileTokens: Begin sends a token of the token
// alphabet inside its BEGIN message and anything else as a parameter. A
// token built to end the string literal (a quote, or a backslash for a
// server with standard_conforming_strings off), or too long, or not ASCII,
// is presented to the guard exactly as given and refused there: no
// statement hidden in it runs and nothing is written.
func TestBeginNeverSplicesHostileTokens(t *testing.T) {
	d := guarded(t)
	ctx := context.Background()
	d.exec(t, "CREATE TABLE bystander (id int)")
	// A second pool whose sessions read backslashes in literals as
	// escapes, as an old server's configuration would.
	cfg, err := pgxpool.ParseConfig(d.dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["standard_conforming_strings"] = "off"
	escaping, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer escaping.Close()
	current := sign(t, key, ep(34, "node-b"))
	hostile := []string{
		"x'; DROP TABLE bystander; --",
		current + "'; DROP TABLE bystander; --",
		`x\'; DROP TABLE bystander; --`,
		`x\`,
		"x';\nDROP TABLE bystander;\n--",
		"x' || (SELECT 'y') || '",
		"tf1:hs256:payments/34/node-b:" + strings.Repeat("A", epoch.MaxTokenLen),
		"tf1:hs256:payments/34/nöde-b:abc",
		"$$; DROP TABLE bystander; $$",
	}
	for _, pool := range []*pgxpool.Pool{d.pool, escaping} {
		for _, tok := range hostile {
			tx, err := pgtrigger.Begin(ctx, pool, tok)
			if err != nil {
				t.Fatalf("Begin(%q): %v", tok, err)
			}
			var presented string
			if err := tx.QueryRow(ctx, "SELECT current_setting('termfence.token')").Scan(&presented); err != nil {
				t.Fatal(err)
			}
			if presented != tok {
				t.Errorf("Begin(%q) presented %q", tok, presented)
			}
			_, err = tx.Exec(ctx, "UPDATE ledger SET note = 'hostile'")
			if code := sqlState(err); code != pgtrigger.CodeMalformed && code != pgtrigger.CodeBadSignature {
				t.Errorf("write under %q: %v, want SQLSTATE %s or %s", tok, err, pgtrigger.CodeMalformed, pgtrigger.CodeBadSignature)
			}
			tx.Rollback(ctx)
		}
		// Every valid token is sent in the BEGIN message, and works on
		// either server setting.
		tx, err := pgtrigger.Begin(ctx, pool, current)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "UPDATE ledger SET note = 'current'"); err != nil {
			t.Fatalf("write under the current token: %v", err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := d.count(t, "SELECT count(*) FROM bystander"); n != 0 {
		t.Fatalf("bystander has %d rows", n)
	}
	if n := d.count(t, "SELECT count(*) FROM ledger WHERE note = 'hostile'"); n != 0 {
		t.Fatalf("%d hostile writes committed", n)
	}
}

// sqlState is the SQLSTATE of a PostgreSQL error in err's chain, or "".
func sqlState(err error) string {
	var pe interface{ SQLState() string }
	if errors.As(err, &pe) {
		return pe.SQLState()
	}
	return ""
}
