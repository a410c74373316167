// Package pgproto holds the SQL that every PostgreSQL fence
// (storageguard/sqlfence, storageguard/pgfence and the trigger of
// storageguard/pgtrigger) must spell alike, so that all of them guarding one
// fence table agree: how a raise is made durable and how a raise gets its
// turn.
//
// # The turn: an intent lock before the row lock
//
// The fence row alone is not fair: PostgreSQL grants FOR SHARE to a new
// transaction while a FOR UPDATE waits for the current sharers, so a
// stream of short transactions under the older epoch can keep a newer
// epoch's raise waiting for ever. Every fence therefore takes a
// transaction-level advisory lock on the resource before it locks the row:
// shared beside FOR SHARE, exclusive beside FOR UPDATE. PostgreSQL's lock
// manager queues a shared request behind a waiting exclusive one, so once a
// raise asks, the transactions that ask after it wait for it, and the raise
// waits only for those that held the resource before it asked (as dirfence's
// intent file does). The row lock still decides what is admitted; the
// advisory lock only orders who asks.
//
// The advisory lock takes its one 64-bit key from the fence table's OID and
// the resource name (LockKey), in the bigint key space of
// pg_advisory_xact_lock: an application's own advisory locks meet it only
// by a 64-bit collision.
package pgproto

// LockKey returns the SQL expression of the advisory-lock key of a fence
// row, given SQL expressions for the fence table's OID (a row's tableoid,
// or the table's regclass cast to oid) and for the resource (bytea): the
// first 64 bits of the MD5 of "<oid>:<hex of the resource>".
func LockKey(tableOID, resource string) string {
	return "('x' || pg_catalog.substr(pg_catalog.md5((" + tableOID + ")::pg_catalog.text || ':' || pg_catalog.encode(" +
		resource + ", 'hex')), 1, 16))::pg_catalog.bit(64)::pg_catalog.int8"
}

// LockShared is a boolean SQL expression (always false) that takes the
// shared advisory lock of the fence row read by the query it is in (alias
// f, or the table's name when alias is that): put it in the select list of
// the statement that locks the row FOR SHARE. PostgreSQL computes the
// select list below the row-locking step, so the advisory lock is taken
// first, and only for the row the statement matched.
func LockShared(alias string) string {
	return "pg_catalog.pg_advisory_xact_lock_shared(" + LockKey(alias+".tableoid", alias+".resource") + ") IS NULL"
}

// LockExclusive is LockShared's exclusive form, beside FOR UPDATE.
func LockExclusive(alias string) string {
	return "pg_catalog.pg_advisory_xact_lock(" + LockKey(alias+".tableoid", alias+".resource") + ") IS NULL"
}

// Durable is a SQL expression that makes the transaction it runs in commit
// with synchronous_commit = on unless the setting is already as strong (on
// or remote_apply), whatever the role, database or session default says.
// A raise must be on disk before any write runs under it: a raise
// acknowledged under synchronous_commit = off (or local, or remote_write,
// which a standby's crash can lose) can be undone by a crash, and the
// older epoch admitted again afterwards. It is transaction-local
// (set_config's is_local), so it ends with the raising transaction.
const Durable = "CASE WHEN pg_catalog.current_setting('synchronous_commit') NOT IN ('on', 'remote_apply') " +
	"THEN pg_catalog.set_config('synchronous_commit', 'on', true) END"
