package pgtrigger

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/internal/pgproto"
	"github.com/termfence/termfence/storageguard/pgfence"
)

// guardSQL creates the guard's functions in the private schema; see its
// header for the names Install substitutes.
//
//go:embed guard.sql
var guardSQL string

const (
	// TriggerName is the name of the guard's trigger on every guarded
	// table.
	TriggerName = "termfence_guard"
	// ReplicaTriggerName is the name of the guard's row trigger on every
	// ordinary table of a guarded tree: logical replication's apply worker
	// fires no statement triggers, so a BEFORE ... FOR EACH ROW trigger,
	// ENABLE ALWAYS and only when session_replication_role is replica (as
	// the apply worker runs), puts every replicated row through the
	// guard's checks. The apply worker presents no token, so the guard
	// refuses its writes (CodeNoToken) and the subscription stops with an
	// error: a replicated write is never applied unchecked.
	ReplicaTriggerName = "termfence_guard_replica"
	// monotonicName and monotonicTruncateName are the triggers that keep
	// the fence table's rows from going down.
	monotonicName         = "termfence_monotonic"
	monotonicTruncateName = "termfence_monotonic_truncate"
	// fenceTable is pgfence's (and sqlfence's) table.
	fenceTable = "termfence_fence"
	// installLock is the transaction-level advisory lock key that
	// serializes Install and Uninstall across sessions ("termfen" in
	// ASCII): CREATE OR REPLACE FUNCTION run by two sessions at once fails.
	installLock int64 = 0x7465726d66656e
)

// maxTerm is the highest term the guard accepts: epoch.MaxTerm, as every
// decoder and fence.
var maxTerm = strconv.FormatUint(epoch.MaxTerm, 10)

var (
	// ErrNoKey is returned by Install when the cluster has no stored HMAC
	// key, none is given and unsigned tokens are not allowed: no token
	// could ever be accepted.
	ErrNoKey = errors.New("pgtrigger: no HMAC key for the cluster")
	// ErrUnsafe is returned by Install when an object the guard relies on
	// is owned by, or grants privileges to, a role other than the
	// installing one: the private schema or one of its objects, or the
	// fence table. Such a role could read the key or rewrite the
	// high-water marks. Also when a role other than the owner holds
	// TRIGGER on the table, its partitions and children or the fence
	// table, or a trigger there calls a function of a role that is neither
	// the owner nor a superuser: a trigger writes under the leader's
	// token. The error names the object and the role.
	ErrUnsafe = errors.New("pgtrigger: unsafe to install")
)

// Install guards cfg.Table: from the moment it returns, every INSERT,
// UPDATE, DELETE, TRUNCATE, COPY FROM and MERGE on the table (and on each of
// its partitions and inheritance children) fails unless the writing
// transaction presents an authentic token of cfg.Cluster whose epoch is not
// older than cfg.Resource's highest; a newer epoch raises it. See the
// package documentation for what that covers and what it does not.
//
// Install runs as the pool's role, which becomes the owner of the guard
// and must own the table and the fence table termfence_fence (created, as
// pgfence.Open creates it, in the connections' current schema if missing):
// the guard runs with that role's rights. It creates the pgcrypto extension
// if it is missing (in schema public, which the guards of every schema
// share), and the private schema
// cfg.Schema, and stores cfg.HMACKey and cfg.HMACKeys there. It is idempotent, all in one
// transaction, and serialized with every other Install and Uninstall on the
// database; run it again after adding a partition or a child table.
//
// The key travels to the server as a query parameter: use TLS to a remote
// server, and keep statement logging with parameters (log_statement,
// auto_explain) off while installing.
func Install(ctx context.Context, pool *pgxpool.Pool, cfg Config) error {
	if pool == nil {
		return errors.New("pgtrigger: Install: nil pool")
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	f, err := pgfence.Open(ctx, pool)
	if err != nil {
		return fmt.Errorf("pgtrigger: %w", err)
	}
	f.Close() // only its table is needed
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return install(ctx, tx, cfg) })
	if err != nil && !isOurs(err) {
		return fmt.Errorf("pgtrigger: install on %s: %w", cfg.Table, err)
	}
	return err
}

// isOurs reports an error that already says it is pgtrigger's.
func isOurs(err error) bool {
	return errors.Is(err, ErrNoKey) || errors.Is(err, ErrUnsafe) || errors.Is(err, storageguard.ErrBadConfig)
}

// ident quotes a PostgreSQL identifier.
func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// relation is one table of a guarded tree.
type relation struct {
	oid          uint32
	schema, name string
	kind         string
}

func (r relation) String() string { return ident(r.schema) + "." + ident(r.name) }

func install(ctx context.Context, tx pgx.Tx, cfg Config) error {
	if _, err := tx.Exec(ctx, "SELECT pg_catalog.pg_advisory_xact_lock($1)", installLock); err != nil {
		return err
	}
	private := cfg.schema()
	var fenceSchema *string
	if err := tx.QueryRow(ctx, "SELECT pg_catalog.current_schema()").Scan(&fenceSchema); err != nil {
		return err
	}
	if fenceSchema == nil {
		return fmt.Errorf("pgtrigger: %w: no schema on the connection's search_path for the fence table", storageguard.ErrBadConfig)
	}
	if *fenceSchema == private {
		return fmt.Errorf("pgtrigger: %w: the private schema %s cannot hold the fence table", storageguard.ErrBadConfig, ident(private))
	}
	fence := ident(*fenceSchema) + "." + ident(fenceTable)
	if err := requireOwner(ctx, tx, fence, "the fence table"); err != nil {
		return err
	}
	tree, err := tableTree(ctx, tx, cfg.Table)
	if err != nil {
		return err
	}
	for _, r := range tree {
		if r.schema == private || (r.schema == *fenceSchema && r.name == fenceTable) {
			return fmt.Errorf("pgtrigger: %w: %s is one of termfence's own tables", storageguard.ErrBadConfig, r)
		}
	}

	// The private schema: created by us, or ours already. A schema of
	// that name owned by someone else would give them our functions.
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)", private).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		if _, err := tx.Exec(ctx, "CREATE SCHEMA "+ident(private)); err != nil {
			return err
		}
	}
	if err := requireOwner(ctx, tx, ident(private), "the private schema"); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "REVOKE ALL ON SCHEMA "+ident(private)+" FROM PUBLIC"); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `
CREATE TABLE IF NOT EXISTS `+ident(private)+`.settings (
  only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
  fence_schema text NOT NULL);
CREATE TABLE IF NOT EXISTS `+ident(private)+`.hmac_key (
  cluster text NOT NULL,
  key_id text NOT NULL,
  key bytea NOT NULL CHECK (octet_length(key) >= `+strconv.Itoa(epoch.MinHMACKeyLen)+`),
  PRIMARY KEY (cluster, key_id));
CREATE TABLE IF NOT EXISTS `+ident(private)+`.resource (
  resource bytea PRIMARY KEY,
  cluster text NOT NULL);
REVOKE ALL ON `+ident(private)+`.settings, `+ident(private)+`.hmac_key, `+ident(private)+`.resource FROM PUBLIC`); err != nil {
		return err
	}
	// One private schema serves one fence table: its functions name it.
	var served string
	err = tx.QueryRow(ctx, "INSERT INTO "+ident(private)+".settings (fence_schema) VALUES ($1) ON CONFLICT (only_row) DO UPDATE SET fence_schema = "+ident(private)+".settings.fence_schema RETURNING fence_schema", *fenceSchema).Scan(&served)
	if err != nil {
		return err
	}
	if served != *fenceSchema {
		return fmt.Errorf("pgtrigger: %w: the private schema %s serves the fence table in schema %s, not %s: use another Config.Schema", storageguard.ErrBadConfig, ident(private), ident(served), ident(*fenceSchema))
	}

	if keys := cfg.keys(); len(keys) > 0 {
		// The cluster's key set becomes exactly these keys.
		if _, err := tx.Exec(ctx, "DELETE FROM "+ident(private)+".hmac_key WHERE cluster = $1", cfg.Cluster); err != nil {
			return err
		}
		for _, k := range keys {
			_, err := tx.Exec(ctx, "INSERT INTO "+ident(private)+".hmac_key (cluster, key_id, key) VALUES ($1, $2, $3)", cfg.Cluster, k.id, k.secret)
			if err != nil {
				return err
			}
		}
	} else if !cfg.AllowPlain {
		var has bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+ident(private)+".hmac_key WHERE cluster = $1)", cfg.Cluster).Scan(&has); err != nil {
			return err
		}
		if !has {
			return fmt.Errorf("%w %q: give Config.HMACKey or HMACKeys (or set AllowPlain)", ErrNoKey, cfg.Cluster)
		}
	}

	// The resource belongs to the cluster: a role that may write the fence
	// table cannot give its row to another cluster (termfence_check_raise).
	if _, err := tx.Exec(ctx, "INSERT INTO "+ident(private)+".resource (resource, cluster) VALUES ($1, $2) ON CONFLICT (resource) DO UPDATE SET cluster = excluded.cluster",
		[]byte(cfg.Resource), cfg.Cluster); err != nil {
		return err
	}

	crypto, err := pgcrypto(ctx, tx)
	if err != nil {
		return err
	}
	body := strings.NewReplacer(
		"@private@", ident(private),
		"@fence@", fence,
		"@fenceschema@", ident(*fenceSchema),
		"@crypto@", ident(crypto),
		"@maxterm@", maxTerm,
		"@maxtoken@", strconv.Itoa(epoch.MaxTokenLen),
		"@maxname@", strconv.Itoa(epoch.MaxNameLen),
		"@lockshared@", pgproto.LockShared("f"),
		"@lockexclusive@", pgproto.LockExclusive("f"),
		"@durable@", pgproto.Durable,
	).Replace(guardSQL)
	if _, err := tx.Exec(ctx, body); err != nil {
		return fmt.Errorf("create the guard's functions: %w", err)
	}
	if err := requirePrivate(ctx, tx, private); err != nil {
		return err
	}

	// The fence table: nobody but its owner may lower a high-water mark.
	if _, err := tx.Exec(ctx, `
REVOKE ALL ON `+fence+` FROM PUBLIC;
DROP TRIGGER IF EXISTS `+monotonicName+` ON `+fence+`;
DROP TRIGGER IF EXISTS `+monotonicTruncateName+` ON `+fence+`;
CREATE TRIGGER `+monotonicName+` BEFORE INSERT OR UPDATE OR DELETE ON `+fence+` FOR EACH ROW EXECUTE FUNCTION `+ident(private)+`.monotonic();
CREATE TRIGGER `+monotonicTruncateName+` BEFORE TRUNCATE ON `+fence+` FOR EACH STATEMENT EXECUTE FUNCTION `+ident(private)+`.monotonic();
ALTER TABLE `+fence+` ENABLE ALWAYS TRIGGER `+monotonicName+`;
ALTER TABLE `+fence+` ENABLE ALWAYS TRIGGER `+monotonicTruncateName); err != nil {
		return fmt.Errorf("guard the fence table %s: %w", fence, err)
	}

	approved, err := approveTriggers(ctx, tx, tree, fence, private)
	if err != nil {
		return err
	}
	guard := ident(private) + ".guard"
	for _, r := range tree {
		// The guard on r checks r's own subtree: a row trigger on a
		// partition fires for rows written through r.
		sub, err := tableTree(ctx, tx, r.String())
		if err != nil {
			return err
		}
		var args string
		if err := tx.QueryRow(ctx, "SELECT pg_catalog.format('%L, %L, %L, %L, %L', $1::text, $2::text, $3::text, $4::oid[]::text, $5::oid[]::text)",
			cfg.Resource, cfg.Cluster, strconv.FormatBool(cfg.AllowPlain), oids(sub), approved).Scan(&args); err != nil {
			return err
		}
		var other *string
		err = tx.QueryRow(ctx, `
SELECT p.oid::regprocedure::text FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid
WHERE t.tgrelid = $1::regclass AND t.tgname = $2 AND p.oid <> $3::regprocedure`, r.String(), TriggerName, guard+"()").Scan(&other)
		if err == nil {
			return fmt.Errorf("pgtrigger: %w: %s already has a trigger %s calling %s: Uninstall it first", storageguard.ErrBadConfig, r, TriggerName, *other)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		_, err = tx.Exec(ctx, `
DROP TRIGGER IF EXISTS `+TriggerName+` ON `+r.String()+`;
CREATE TRIGGER `+TriggerName+` BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON `+r.String()+`
  FOR EACH STATEMENT EXECUTE FUNCTION `+guard+`(`+args+`);
ALTER TABLE ONLY `+r.String()+` ENABLE ALWAYS TRIGGER `+TriggerName)
		if err != nil {
			return fmt.Errorf("guard %s: %w", r, err)
		}
		// The row trigger on the tables that hold rows (a partitioned
		// table's row triggers would be cloned onto its partitions, which
		// have their own).
		if r.kind == "r" {
			_, err = tx.Exec(ctx, `
DROP TRIGGER IF EXISTS `+ReplicaTriggerName+` ON `+r.String()+`;
CREATE TRIGGER `+ReplicaTriggerName+` BEFORE INSERT OR UPDATE OR DELETE ON `+r.String()+`
  FOR EACH ROW WHEN (pg_catalog.current_setting('session_replication_role') = 'replica')
  EXECUTE FUNCTION `+guard+`(`+args+`);
ALTER TABLE ONLY `+r.String()+` ENABLE ALWAYS TRIGGER `+ReplicaTriggerName)
			if err != nil {
				return fmt.Errorf("guard %s against replicated writes: %w", r, err)
			}
		}
	}
	return nil
}

// Uninstall removes the guard from table and from each of its partitions and
// inheritance children: their writes are no longer checked. It leaves the
// private schema (keys and functions, which other tables may use) and the
// fence table with its rows. Uninstalling a table that is not guarded does
// nothing. It needs the same rights as Install on the table.
func Uninstall(ctx context.Context, pool *pgxpool.Pool, table string) error {
	if pool == nil {
		return errors.New("pgtrigger: Uninstall: nil pool")
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_catalog.pg_advisory_xact_lock($1)", installLock); err != nil {
			return err
		}
		tree, err := tableTree(ctx, tx, table)
		if err != nil {
			return err
		}
		for _, r := range tree {
			if _, err := tx.Exec(ctx, "DROP TRIGGER IF EXISTS "+TriggerName+" ON "+r.String()+"; DROP TRIGGER IF EXISTS "+ReplicaTriggerName+" ON "+r.String()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil && !isOurs(err) {
		return fmt.Errorf("pgtrigger: uninstall from %s: %w", table, err)
	}
	return err
}

// tableTree resolves table and lists it with its partitions and inheritance
// children, all ordinary or partitioned tables.
func tableTree(ctx context.Context, tx pgx.Tx, table string) ([]relation, error) {
	var found bool
	if err := tx.QueryRow(ctx, "SELECT pg_catalog.to_regclass($1) IS NOT NULL", table).Scan(&found); err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("pgtrigger: %w: no table %q on the connection's search_path", storageguard.ErrBadConfig, table)
	}
	rows, err := tx.Query(ctx, `
WITH RECURSIVE tree(oid) AS (
  SELECT pg_catalog.to_regclass($1)::oid
  UNION
  SELECT i.inhrelid FROM pg_catalog.pg_inherits i JOIN tree ON i.inhparent = tree.oid)
SELECT c.oid, n.nspname, c.relname, c.relkind::text
FROM tree JOIN pg_catalog.pg_class c ON c.oid = tree.oid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
ORDER BY c.oid`, table)
	if err != nil {
		return nil, err
	}
	tree, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (relation, error) {
		var r relation
		return r, row.Scan(&r.oid, &r.schema, &r.name, &r.kind)
	})
	if err != nil {
		return nil, err
	}
	for _, r := range tree {
		if r.kind != "r" && r.kind != "p" {
			return nil, fmt.Errorf("pgtrigger: %w: %s is not a table (relkind %s): only ordinary and partitioned tables can be guarded", storageguard.ErrBadConfig, r, r.kind)
		}
	}
	return tree, nil
}

// requireOwner fails with ErrUnsafe unless the current role owns the
// table or schema named by quoted.
func requireOwner(ctx context.Context, tx pgx.Tx, quoted, what string) error {
	var owner string
	var mine bool
	q := `SELECT pg_catalog.pg_get_userbyid(c.relowner), c.relowner = (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = current_user)
FROM pg_catalog.pg_class c WHERE c.oid = $1::regclass`
	if what == "the private schema" {
		q = `SELECT pg_catalog.pg_get_userbyid(n.nspowner), n.nspowner = (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = current_user)
FROM pg_catalog.pg_namespace n WHERE n.oid = $1::regnamespace`
	}
	if err := tx.QueryRow(ctx, q, quoted).Scan(&owner, &mine); err != nil {
		return err
	}
	if !mine {
		return fmt.Errorf("%w: %s %s is owned by %s, not by the installing role: the guard's owner must own it (ALTER ... OWNER TO)", ErrUnsafe, what, quoted, owner)
	}
	return nil
}

// requirePrivate fails with ErrUnsafe if the private schema, or any table or
// function in it, is owned by another role or grants any privilege to a
// role other than its owner (for example through ALTER DEFAULT
// PRIVILEGES).
func requirePrivate(ctx context.Context, tx pgx.Tx, private string) error {
	rows, err := tx.Query(ctx, `
WITH objs(what, owner, acl) AS (
  SELECT 'schema ' || n.nspname, n.nspowner, n.nspacl FROM pg_catalog.pg_namespace n WHERE n.nspname = $1
  UNION ALL
  SELECT 'table ' || c.relname, c.relowner, c.relacl FROM pg_catalog.pg_class c
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1
  UNION ALL
  SELECT 'function ' || p.oid::regprocedure::text, p.proowner, p.proacl FROM pg_catalog.pg_proc p
    JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1)
SELECT o.what, CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.pg_get_userbyid(a.grantee) END
FROM objs o CROSS JOIN LATERAL pg_catalog.aclexplode(o.acl) a
WHERE a.grantee <> o.owner
UNION ALL
SELECT o.what || ' (owner)', pg_catalog.pg_get_userbyid(o.owner) FROM objs o
WHERE o.owner <> (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = current_user)`, private)
	if err != nil {
		return err
	}
	leaks, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (string, error) {
		var what, who string
		err := row.Scan(&what, &who)
		return what + " to " + who, err
	})
	if err != nil {
		return err
	}
	if len(leaks) > 0 {
		return fmt.Errorf("%w: in the private schema %s, privileges reach other roles: %s", ErrUnsafe, ident(private), strings.Join(leaks, "; "))
	}
	return nil
}

// pgcrypto returns the schema of the pgcrypto extension, creating the
// extension in schema public if it is missing. Not in the current schema:
// an extension is one per database, and every guard of the database calls
// it where it is, so it must not live in a schema an application drops
// with its tables (dropping that schema would take the extension along and
// make every other guard's writes fail).
func pgcrypto(ctx context.Context, tx pgx.Tx) (string, error) {
	const q = "SELECT n.nspname FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pgcrypto'"
	var schema string
	err := tx.QueryRow(ctx, q).Scan(&schema)
	if errors.Is(err, pgx.ErrNoRows) {
		if _, err := tx.Exec(ctx, "CREATE EXTENSION pgcrypto SCHEMA public"); err != nil {
			return "", fmt.Errorf("create extension pgcrypto in schema public (a superuser or the database's owner can: CREATE EXTENSION pgcrypto SCHEMA public): %w", err)
		}
		err = tx.QueryRow(ctx, q).Scan(&schema)
	}
	return schema, err
}

// oids lists the relations' OIDs, in order.
func oids(rs []relation) []uint32 {
	o := make([]uint32, len(rs))
	for i, r := range rs {
		o[i] = r.oid
	}
	return o
}

// approveTriggers fails with ErrUnsafe if a role other than a relation's
// owner holds the TRIGGER privilege on the tree or the fence table, or if a
// trigger there calls a function owned by a role that is neither the
// relation's owner nor a superuser (a trigger some other role created,
// which fires in the leader's transaction, under its token). It returns
// the OIDs of the other triggers there, which the guard lets stay; its own
// (calling the private schema's guard and monotonic, which nobody else may
// call) need no approval.
func approveTriggers(ctx context.Context, tx pgx.Tx, tree []relation, fence, private string) ([]uint32, error) {
	private = ident(private)
	rels := oids(tree)
	rows, err := tx.Query(ctx, `
WITH r(oid) AS (SELECT pg_catalog.unnest($1::oid[]) UNION ALL SELECT $2::regclass::oid)
SELECT 'TRIGGER on ' || c.oid::regclass::text || ' is granted to ' ||
       CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END ||
       ' (REVOKE TRIGGER ON ' || c.oid::regclass::text || ' FROM ' ||
       CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END || ')'
FROM r JOIN pg_catalog.pg_class c ON c.oid = r.oid, LATERAL pg_catalog.aclexplode(c.relacl) a
WHERE a.privilege_type = 'TRIGGER' AND a.grantee <> c.relowner
UNION ALL
SELECT 'trigger ' || pg_catalog.quote_ident(t.tgname) || ' on ' || t.tgrelid::regclass::text || ' calls ' ||
       t.tgfoid::regprocedure::text || ', owned by ' || pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(p.proowner)) ||
       ', not by the table''s owner (drop it, or have the owner recreate it)'
FROM r JOIN pg_catalog.pg_trigger t ON t.tgrelid = r.oid
  JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
  JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid
  JOIN pg_catalog.pg_roles o ON o.oid = p.proowner
WHERE NOT t.tgisinternal AND t.tgfoid NOT IN ($3::regprocedure, $4::regprocedure)
  AND p.proowner <> c.relowner AND NOT o.rolsuper`, rels, fence, private+".guard()", private+".monotonic()")
	if err != nil {
		return nil, err
	}
	weak, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	if len(weak) > 0 {
		return nil, fmt.Errorf("%w: %s: a trigger fires in the leader's transaction and writes under its token", ErrUnsafe, strings.Join(weak, "; "))
	}
	rows, err = tx.Query(ctx, `
WITH r(oid) AS (SELECT pg_catalog.unnest($1::oid[]) UNION ALL SELECT $2::regclass::oid)
SELECT t.oid FROM r JOIN pg_catalog.pg_trigger t ON t.tgrelid = r.oid
WHERE NOT t.tgisinternal AND t.tgfoid NOT IN ($3::regprocedure, $4::regprocedure)
ORDER BY t.oid`, rels, fence, private+".guard()", private+".monotonic()")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[uint32])
}
