package pgtrigger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// WeaknessKind says what kind of grant or setting a Weakness is.
type WeaknessKind string

// The kinds of Weakness that Audit reports.
const (
	// WeakTrigger: a role other than the relation's owner holds the
	// TRIGGER privilege on a relation of the guarded tree or on the fence
	// table. A trigger fires in the writer's transaction, under its token:
	// the guard refuses every write while the grant exists (closed,
	// CodeMisconfigured), and Install refuses the table.
	WeakTrigger WeaknessKind = "trigger-privilege"
	// WeakUnapprovedTrigger: a trigger that Install did not see (and so did
	// not vet) on the tree or the fence table; the guard refuses every
	// write until the owner drops it or runs Install again.
	WeakUnapprovedTrigger WeaknessKind = "unapproved-trigger"
	// WeakOwnership: a role other than the guard's owner can act as the
	// owner of the guarded tree, the fence table or the private schema —
	// it owns one, is a member of an owning role, or is a superuser — and
	// so can drop or disable the guard, lower the fence row or read the
	// key.
	WeakOwnership WeaknessKind = "ownership"
	// WeakReadAllData: a member of pg_read_all_data (PostgreSQL 14 and
	// later), which can read the HMAC key in the private schema and so sign
	// any token.
	WeakReadAllData WeaknessKind = "read-all-data"
	// WeakFenceWrite: a role other than the fence table's owner may write
	// termfence_fence (INSERT, UPDATE, DELETE, TRUNCATE, or membership in
	// pg_write_all_data), as pgfence and sqlfence writers need. Rows of a
	// cluster whose key is in the database only rise, and only to the
	// epoch of a verified token; a cluster without a stored key (Ed25519)
	// has only the first, so such a role can raise its rows to any term and
	// lock its leaders out. With UPDATE it can also hold a row FOR UPDATE
	// and delay every writer.
	WeakFenceWrite WeaknessKind = "fence-write"
	// WeakAllowPlain: the guard accepts unsigned tokens (Config.AllowPlain):
	// anyone who may write the table can present any epoch.
	WeakAllowPlain WeaknessKind = "allow-plain"
	// WeakUnguarded: a relation of the tree (a partition or child added
	// after Install, or one whose guard was dropped, disabled or installed
	// by an older release) that the guard does not check.
	WeakUnguarded WeaknessKind = "unguarded"
	// WeakSubscription: a logical replication subscription writes into a
	// relation of the tree. Its apply worker presents no token, so the
	// guard's row trigger refuses its writes and the subscription stops
	// with an error; guard the publisher's table instead, and drop the
	// table from the subscription.
	WeakSubscription WeaknessKind = "subscription"
	// WeakPrepared: a prepared transaction (PREPARE TRANSACTION, with
	// max_prepared_transactions > 0) holds a lock on a relation of the
	// tree or on the fence table. It keeps its locks (a hold on the fence
	// row, under its epoch) across disconnects,
	// idle_in_transaction_session_timeout and server restarts, until
	// COMMIT PREPARED or ROLLBACK PREPARED: every newer epoch waits for it.
	WeakPrepared WeaknessKind = "prepared-transaction"
)

// Weakness is one grant or setting that weakens a guarded table.
type Weakness struct {
	Kind WeaknessKind
	// Relation is the relation or schema concerned (quoted, qualified),
	// or "".
	Relation string
	// Role is the role concerned ("PUBLIC" for a grant to everyone), or
	// "".
	Role string
	// What says it in one line, with the remedy where there is one.
	What string
}

func (w Weakness) String() string { return string(w.Kind) + ": " + w.What }

// Audit lists every grant and setting that weakens the guard on table (as
// Install names it, on the pool's search_path): the TRIGGER privilege or
// triggers Install did not approve on the table, its partitions and
// children or the fence table; roles that can act as an owner (owners
// other than the guard's, members of owning roles, superusers); members of
// pg_read_all_data; roles that may write the fence table; AllowPlain; and
// partitions or children the guard does not check. An empty list means
// none of these: the package's guarantees hold against every other role.
// It changes nothing. Run it as the guard's owner (it reads the private
// schema's settings); a table with no guard at all is reported as
// unguarded.
func Audit(ctx context.Context, pool *pgxpool.Pool, table string) ([]Weakness, error) {
	if pool == nil {
		return nil, errors.New("pgtrigger: Audit: nil pool")
	}
	var ws []Weakness
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		ws, err = audit(ctx, tx, table)
		return err
	})
	if err != nil && !isOurs(err) {
		return nil, fmt.Errorf("pgtrigger: audit %s: %w", table, err)
	}
	return ws, err
}

// firstOID reports whether the array literal list ("{1,2}") starts with
// oid.
func firstOID(list string, oid uint32) bool {
	first, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSuffix(list, "}"), "{"), ",")
	return first == strconv.FormatUint(uint64(oid), 10)
}

// guardTrigger is the guard's trigger on one relation, as Audit finds it.
type guardTrigger struct {
	private string   // the schema of its function
	enabled string   // pg_trigger.tgenabled
	args    []string // its arguments
}

func audit(ctx context.Context, tx pgx.Tx, table string) ([]Weakness, error) {
	tree, err := tableTree(ctx, tx, table)
	if err != nil {
		return nil, err
	}
	// Every name from here on qualified, whatever the caller's search_path.
	if _, err := tx.Exec(ctx, "SET LOCAL search_path = pg_catalog, pg_temp"); err != nil {
		return nil, err
	}
	root := tree[0]
	var ws []Weakness
	add := func(kind WeaknessKind, rel, role, what string) {
		ws = append(ws, Weakness{Kind: kind, Relation: rel, Role: role, What: what})
	}
	guards := map[uint32]guardTrigger{}
	rows, err := tx.Query(ctx, `
SELECT t.tgrelid, n.nspname, t.tgenabled::text, t.tgargs
FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid
  JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
WHERE t.tgrelid = ANY ($1::oid[]) AND t.tgname = $2 AND p.proname = 'guard'`, oids(tree), TriggerName)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var rel uint32
		var g guardTrigger
		var args []byte
		if err := rows.Scan(&rel, &g.private, &g.enabled, &args); err != nil {
			return nil, err
		}
		for _, a := range bytes.Split(args, []byte{0}) {
			g.args = append(g.args, string(a))
		}
		guards[rel] = g
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rg, ok := guards[root.oid]
	if !ok {
		for _, r := range tree {
			add(WeakUnguarded, r.String(), "", r.String()+" has no guard: run Install")
		}
		return ws, nil
	}
	private := rg.private
	for _, r := range tree {
		g, ok := guards[r.oid]
		switch {
		case !ok || g.private != private:
			add(WeakUnguarded, r.String(), "", r.String()+" is not guarded (a partition or child added after Install?): run Install again")
		case g.enabled != "A":
			add(WeakUnguarded, r.String(), "", r.String()+"'s guard is not ENABLE ALWAYS (tgenabled "+g.enabled+"): run Install again")
		case len(g.args) < 5 || !firstOID(g.args[3], r.oid):
			add(WeakUnguarded, r.String(), "", r.String()+"'s guard was installed by an older release or on another table: it refuses every write until Install runs again")
		}
		if ok && len(g.args) > 2 && g.args[2] == "true" {
			add(WeakAllowPlain, r.String(), "", r.String()+" accepts unsigned tokens (AllowPlain): anyone who may write it can present any epoch")
		}
	}

	var fenceSchema string
	if err := tx.QueryRow(ctx, "SELECT fence_schema FROM "+ident(private)+".settings").Scan(&fenceSchema); err != nil {
		return nil, fmt.Errorf("read the private schema %s (Audit runs as the guard's owner): %w", ident(private), err)
	}
	fence := ident(fenceSchema) + "." + ident(fenceTable)
	var approved []uint32
	if len(rg.args) >= 5 {
		if err := tx.QueryRow(ctx, "SELECT $1::oid[]", rg.args[4]).Scan(&approved); err != nil {
			return nil, err
		}
	}
	// rels are the tree and the fence table; owners the private schema
	// too.
	rows, err = tx.Query(ctx, `
WITH RECURSIVE r(oid) AS (SELECT pg_catalog.unnest($1::oid[]) UNION ALL SELECT $2::regclass::oid),
guard_owner AS (SELECT nspowner AS oid FROM pg_catalog.pg_namespace WHERE nspname = $3),
owned(what, owner) AS (
  SELECT c.oid::regclass::text, c.relowner FROM r JOIN pg_catalog.pg_class c ON c.oid = r.oid
  UNION SELECT 'schema ' || pg_catalog.quote_ident($3), (SELECT oid FROM guard_owner)),
members(roleid, member) AS (
  SELECT roleid, member FROM pg_catalog.pg_auth_members
  UNION SELECT m.roleid, a.member FROM members m JOIN pg_catalog.pg_auth_members a ON a.roleid = m.member)
-- TRIGGER granted on the tree or the fence table.
SELECT $4::text, c.oid::regclass::text, CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.pg_get_userbyid(a.grantee)::text END,
       'TRIGGER on ' || c.oid::regclass::text || ' is granted to ' || CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END ||
       ': its triggers would write under the leader''s token, so the guard refuses every write; REVOKE TRIGGER'
FROM r JOIN pg_catalog.pg_class c ON c.oid = r.oid, LATERAL pg_catalog.aclexplode(c.relacl) a
WHERE a.privilege_type = 'TRIGGER' AND a.grantee <> c.relowner
UNION ALL
-- Triggers Install did not approve.
SELECT $5, t.tgrelid::regclass::text, pg_catalog.pg_get_userbyid(p.proowner)::text,
       'trigger ' || pg_catalog.quote_ident(t.tgname) || ' on ' || t.tgrelid::regclass::text || ' (function ' || t.tgfoid::regprocedure::text ||
       ', owned by ' || pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(p.proowner)) || ') was not there when Install ran: the guard refuses every write until it is dropped or Install runs again'
FROM r JOIN pg_catalog.pg_trigger t ON t.tgrelid = r.oid JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid
WHERE NOT t.tgisinternal AND t.tgfoid NOT IN ($9::regprocedure, $10::regprocedure) AND t.oid <> ALL ($11::oid[])
UNION ALL
-- Owners other than the guard's.
SELECT $6, o.what, pg_catalog.pg_get_userbyid(o.owner)::text,
       o.what || ' is owned by ' || pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(o.owner)) || ', not by the guard''s owner ' ||
       pg_catalog.quote_ident(pg_catalog.pg_get_userbyid((SELECT oid FROM guard_owner)))
FROM owned o WHERE o.owner <> (SELECT oid FROM guard_owner)
UNION ALL
-- Members of an owning role.
SELECT DISTINCT $6, o.what, pg_catalog.pg_get_userbyid(m.member)::text,
       pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(m.member)) || ' is a member of ' || pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(o.owner)) ||
       ', the owner of ' || o.what || ': it can act as the owner'
FROM owned o JOIN members m ON m.roleid = o.owner
UNION ALL
-- Superusers.
SELECT $6, '', s.rolname::text,
       pg_catalog.quote_ident(s.rolname) || ' is a superuser: it can drop the guard, lower the fence row and read the key'
FROM pg_catalog.pg_roles s WHERE s.rolsuper AND s.oid <> (SELECT oid FROM guard_owner)
UNION ALL
-- pg_read_all_data reads the key; pg_write_all_data writes the fence table.
SELECT CASE WHEN m.roleid = pg_catalog.to_regrole('pg_read_all_data') THEN $7 ELSE $8 END, '', pg_catalog.pg_get_userbyid(m.member)::text,
       pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(m.member)) || ' is a member of ' || pg_catalog.pg_get_userbyid(m.roleid) ||
       CASE WHEN m.roleid = pg_catalog.to_regrole('pg_read_all_data') THEN ': it can read the HMAC key and sign any token'
            ELSE ': it may write the fence table' END
FROM members m WHERE m.roleid IN (pg_catalog.to_regrole('pg_read_all_data'), pg_catalog.to_regrole('pg_write_all_data'))
UNION ALL
-- Fence-table writes.
SELECT $8, c.oid::regclass::text, CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.pg_get_userbyid(a.grantee)::text END,
       CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END ||
       ' may ' || pg_catalog.string_agg(a.privilege_type, ', ' ORDER BY a.privilege_type) || ' the fence table ' || c.oid::regclass::text ||
       ': it can raise rows of clusters without a stored key (Ed25519) to any term, and lock rows'
FROM pg_catalog.pg_class c, LATERAL pg_catalog.aclexplode(c.relacl) a
WHERE c.oid = $2::regclass AND a.grantee <> c.relowner AND a.privilege_type IN ('INSERT', 'UPDATE', 'DELETE', 'TRUNCATE')
GROUP BY c.oid, a.grantee`,
		oids(tree), fence, private,
		string(WeakTrigger), string(WeakUnapprovedTrigger), string(WeakOwnership), string(WeakReadAllData), string(WeakFenceWrite),
		ident(private)+".guard()", ident(private)+".monotonic()", approved)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var w Weakness
		var kind string
		if err := rows.Scan(&kind, &w.Relation, &w.Role, &w.What); err != nil {
			return nil, err
		}
		w.Kind = WeaknessKind(kind)
		ws = append(ws, w)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	more, err := auditReplication(ctx, tx, tree, fence)
	if err != nil {
		return nil, err
	}
	ws = append(ws, more...)
	slices.SortStableFunc(ws, func(a, b Weakness) int { return strings.Compare(string(a.Kind), string(b.Kind)) })
	return ws, nil
}

// auditReplication lists the ordinary tables of tree without the guard's
// row trigger against replicated writes (ENABLE ALWAYS), the subscriptions
// that write into tree, and the prepared transactions that hold a lock on
// tree or on the fence table.
func auditReplication(ctx context.Context, tx pgx.Tx, tree []relation, fence string) ([]Weakness, error) {
	rows, err := tx.Query(ctx, `
SELECT $2::text, c.oid::regclass::text, '',
       c.oid::regclass::text || CASE WHEN t.oid IS NULL THEN ' has no guard against replicated writes (trigger ' || $3 || ')'
                                      ELSE ': its guard against replicated writes is not ENABLE ALWAYS' END || ': run Install again'
FROM pg_catalog.pg_class c LEFT JOIN pg_catalog.pg_trigger t ON t.tgrelid = c.oid AND t.tgname = $3
WHERE c.oid = ANY ($1::oid[]) AND c.relkind = 'r' AND (t.oid IS NULL OR t.tgenabled <> 'A')
UNION ALL
SELECT $4, sr.srrelid::regclass::text, pg_catalog.pg_get_userbyid(s.subowner)::text,
       'subscription ' || pg_catalog.quote_ident(s.subname) || ' replicates into ' || sr.srrelid::regclass::text ||
       ': the guard refuses its apply worker''s writes (no token), so it stops with an error; guard the publisher''s table and drop this one from the subscription'
FROM pg_catalog.pg_subscription_rel sr JOIN pg_catalog.pg_subscription s ON s.oid = sr.srsubid
WHERE sr.srrelid = ANY ($1::oid[])
UNION ALL
SELECT DISTINCT $5, l.relation::regclass::text, p.owner::text,
       'prepared transaction ' || pg_catalog.quote_literal(p.gid) || ' (prepared ' || p.prepared::text || ' by ' || pg_catalog.quote_ident(p.owner) ||
       ') holds a lock on ' || l.relation::regclass::text || ' across restarts: a newer epoch waits for it until COMMIT PREPARED or ROLLBACK PREPARED'
FROM pg_catalog.pg_prepared_xacts p
  JOIN pg_catalog.pg_locks x ON x.locktype = 'transactionid' AND x.transactionid = p.transaction AND x.pid IS NULL
  JOIN pg_catalog.pg_locks l ON l.virtualtransaction = x.virtualtransaction AND l.pid IS NULL
WHERE l.locktype = 'relation' AND (l.relation = ANY ($1::oid[]) OR l.relation = $6::regclass)`,
		oids(tree), string(WeakUnguarded), ReplicaTriggerName, string(WeakSubscription), string(WeakPrepared), fence)
	if err != nil {
		return nil, err
	}
	var ws []Weakness
	for rows.Next() {
		var w Weakness
		var kind string
		if err := rows.Scan(&kind, &w.Relation, &w.Role, &w.What); err != nil {
			return nil, err
		}
		w.Kind = WeaknessKind(kind)
		ws = append(ws, w)
	}
	return ws, rows.Err()
}
