// Package pgtrigger puts the fence inside PostgreSQL: Install guards a table
// with a trigger that refuses every write whose transaction does not present
// a current token, whoever the client is — a Go service, a cron job in
// Python, an operator in psql. The Go fences (storageguard/pgfence,
// storageguard/sqlfence) only fence the writes that go through them; a table
// guarded by this package has no unfenced write path left for ordinary
// roles (docs/DESIGN.md, I7).
//
//	err := pgtrigger.Install(ctx, pool, pgtrigger.Config{
//		Table: "ledger", Resource: "ledger", Cluster: "payments", HMACKey: key,
//	})
//
// A writer presents the leader's token (docs/TOKEN.md) in the transaction
// before it writes:
//
//	BEGIN;
//	SET LOCAL termfence.token = 'tf1:hs256:payments/34/node-b:…';
//	UPDATE ledger SET …;
//	COMMIT;
//
// In Go, Begin starts such a transaction (the token travels in BEGIN's
// message), and Present sets the token inside one already open, such as
// pgfence's Tx.
// Refusal turns a refusal into storageguard's errors (ErrStale, …).
//
// # What the guard checks
//
// The trigger is BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE … FOR EACH
// STATEMENT, ENABLE ALWAYS, on the table and on each of its partitions and
// inheritance children. For every such statement — including COPY FROM,
// MERGE, INSERT … ON CONFLICT, writable CTEs, foreign-key cascades from
// other tables, writes from functions, DO blocks, views and deferred
// triggers — it:
//
//  1. reads the token from the setting termfence.token and verifies it as
//     docs/TOKEN.md says, inside the database: HMAC-SHA256 through pgcrypto
//     under the cluster's key that the token names ("hs256": the key
//     without an ID, Config.HMACKey; "hs256.<key ID>": that key of
//     Config.HMACKeys, so a shared secret can be rotated), which lives in a
//     table of a private schema that only the guard's owner can read;
//     unsigned tokens only with Config.AllowPlain;
//  2. refuses an epoch of another cluster than Config.Cluster;
//  3. checks the epoch against the resource's row in termfence_fence —
//     pgfence's table, in the installing connection's current schema — with
//     pgfence's lock protocol: the same epoch holds the row FOR SHARE until
//     the transaction ends, so writers under one epoch run concurrently and
//     a raise waits for them; a newer epoch takes the row FOR UPDATE and
//     raises it in the same transaction, after which older epochs are
//     refused. Go writers through pgfence and writers through the guard
//     therefore agree on one high-water mark, and a raise by either waits
//     for the other's in-flight writes.
//
// A refusal aborts the statement (and so the transaction) with one of these
// SQLSTATEs; stale, conflicting and foreign refusals name the presented and
// the highest epoch in the message and, one per line, in the DETAIL field.
// Unauthenticated ones name nothing of the fence, and how long their check
// takes does not depend on it, so a forger learns nothing.
//
//	TF001  CodeNoToken        no token presented
//	TF002  CodeMalformed      malformed, over 1024 bytes, term 0 or above the bound
//	TF003  CodeUnsigned       unsigned token, AllowPlain not set
//	TF004  CodeBadSignature   forged, altered, other key, ed25519, no key stored
//	TF005  CodeForeign        another cluster's epoch
//	TF006  CodeStale          older than the highest: the leader was deposed
//	TF007  CodeConflict       the highest term, another leader
//	TF008  CodeFenceRegress   an UPDATE/DELETE/TRUNCATE lowering the fence table
//	TF009  CodeMisconfigured  a guard trigger created by hand, wrongly, or a
//	                          TRIGGER grant or unapproved trigger on the tree
//	TF010  CodeFenceUnverified a fence row raised past the token's epoch
//
// # Guarantees
//
// Against any role that is neither a superuser nor the owner of the guarded
// table, of termfence_fence or of the private schema (tested with such a
// role and psql, package tests TestHostileRole and others):
//
//   - No write to the guarded table commits unless its transaction presented
//     an authentic token whose epoch was not older than the resource's
//     highest when the write ran, and no newer epoch was admitted until that
//     transaction ended.
//   - The key cannot be read: the private schema grants nothing to anyone,
//     the functions that read the key are SECURITY DEFINER with search_path
//     pinned to pg_catalog, pg_temp and every other name schema-qualified,
//     and EXECUTE is revoked from PUBLIC. Install refuses to use a private
//     schema, key table or fence table that another role owns or can reach.
//   - The guard cannot be switched off or replaced: disabling or dropping a
//     trigger, CREATE RULE, ALTER TABLE and replacing a function need
//     ownership; session_replication_role = replica needs a superuser, and
//     the guard is ENABLE ALWAYS so it fires in replica mode too.
//   - Objects a role creates with the guard's names — in its own schemas or
//     pg_temp, functions, operators, tables — are never used by the guard.
//   - The fence row only rises: a trigger on termfence_fence refuses any
//     UPDATE that lowers a row or moves it to another cluster or resource,
//     and DELETE and TRUNCATE (CodeFenceRegress), even from roles granted
//     write access to the table (as Go writers through pgfence need).
//   - A fence row rises only under its epoch's token: a role other than the
//     fence table's owner that creates or raises a row of a cluster whose
//     key is in the database must present, in the same transaction, a
//     verified token of exactly that epoch (CodeNoToken … CodeBadSignature,
//     CodeFenceUnverified); pgfence does so with Options.Signer. A row of a
//     resource that a guard checks belongs to the guard's cluster
//     (CodeForeign). So a role that may write the fence table cannot wedge
//     a resource (a term of 2^48 that refuses every real leader) or give it
//     to another cluster (tests TestFenceRaiseNeedsToken,
//     TestPgfenceRaiseAsFenceWriter).
//   - The TRIGGER privilege is no write path: a trigger fires in the
//     writer's transaction, under its token, and could write rows of its
//     own, rewrite the writer's rows or skip its DELETE. Install refuses a
//     table when a role other than the owner holds TRIGGER on it, on one of
//     its partitions or children or on termfence_fence, or when a trigger
//     there calls a function owned by a role that is neither the owner nor
//     a superuser (ErrUnsafe, naming the grant or the trigger). It approves
//     the triggers it finds, and the guard refuses every write (closed,
//     CodeMisconfigured) while a trigger Install did not approve exists on
//     the table, its partitions or children, or (for a raise) on the fence
//     table. A TRIGGER grant alone closes a partitioned table at once
//     (a partition is locked only when rows reach it, so a trigger could
//     appear under a running statement) and any other table at its next
//     raise (the statement's lock on the table it names keeps a trigger
//     from appearing under it; the cheaper check keeps the common write
//     fast) (TestTriggerPrivilegeIsAWritePath, TestTriggerPrivilegeTree,
//     TestHostileRoleWithTrigger).
//   - The token check and the raise commit with the writes or not at all; a
//     refused statement changes nothing.
//   - A raise (a new or raised fence row, by anyone) commits with
//     synchronous_commit on whatever the writer's session says, and waits
//     only for the writers that held the row when it asked: later writers
//     under the older epoch queue behind it (storageguard/internal/pgproto).
//
// Audit lists, for a guarded table, everything that weakens these: the
// grants and roles of the non-guarantees below, TRIGGER grants, triggers
// Install did not approve, write access to termfence_fence, AllowPlain
// and unguarded partitions.
//
// # Non-guarantees
//
//   - A superuser, the owner of the guarded table or of termfence_fence, or
//     the guard's owner (and members of those roles) can drop or disable
//     the guard, lower the fence row or read the key. Do not write with
//     those roles. Members of pg_read_all_data (PostgreSQL 14 and later)
//     can read the key.
//   - A trigger the owner adds to a guarded table (or its tree, or
//     termfence_fence) after Install closes the table (CodeMisconfigured)
//     until Install runs again; so does restoring a dump (the approved
//     triggers are known by OID). A guard installed by an older release
//     refuses every write until Install runs again.
//   - The trigger and grant checks read the catalogs with the statement's
//     snapshot: a REPEATABLE READ or SERIALIZABLE transaction does not see
//     a TRIGGER grant and a trigger that were both committed after it took
//     its snapshot and before it first wrote the table. Revoke TRIGGER
//     from everyone but the owner (Install refuses otherwise) and it
//     cannot happen.
//   - Code that runs in a token-bearing transaction writes under the token:
//     triggers on the other tables it writes, functions it calls, whoever
//     owns them. Only the guarded tables' and the fence table's triggers
//     are vetted.
//   - A role that may write termfence_fence can raise the rows of a cluster
//     whose key is not in the database (Ed25519 tokens) to any term, and
//     lock its leaders out; with UPDATE it can also hold any row FOR
//     UPDATE and delay writers. Grant fence-table writes only to the roles
//     the leaders write with. sqlfence presents no token: a sqlfence writer
//     that raises an HMAC cluster's row must use the fence table's owner
//     role (or pgfence with Options.Signer).
//   - A partition or child table added after Install is unguarded until
//     Install runs again. A foreign table or another relation kind in the
//     tree makes Install fail.
//   - Reads are not fenced: a deposed leader can still SELECT.
//   - Ed25519 tokens cannot be verified in the database (no Ed25519 in
//     PostgreSQL); such clusters must hand database writers an HMAC token or
//     allow plain tokens.
//   - A token is not a secret and is not bound to a role: any role that may
//     write the table and sees the current token — in psql history, in
//     pg_stat_activity (its own sessions' queries, or everyone's for
//     pg_read_all_stats) or in logs — can write under it until a newer epoch
//     is seen. Table privileges still decide who may write; the token
//     decides when. SET LOCAL, which ends with the transaction, is safer
//     than a session-wide SET on a pooled connection.
//   - Any writer with the current token can hold the fence row FOR SHARE
//     for as long as its transaction stays open, and so delay the next
//     leader's first write; set idle_in_transaction_session_timeout.
//   - A transaction that presents an older token and then a newer one holds
//     the row FOR SHARE and asks for FOR UPDATE; two such transactions at
//     once deadlock, and PostgreSQL aborts one (40P01).
//   - The key is sent to the server as a query parameter when Install stores
//     it: use TLS, and keep statement logging with parameters off while
//     installing. Dropping or moving pgcrypto makes every guarded write fail
//     (closed) until Install runs again. Install creates a missing pgcrypto
//     in schema public, never in an application's schema: dropping that
//     schema with CASCADE would take the extension, shared by every guard of
//     the database, along with it.
//   - Logical replication: the apply worker fires no statement triggers;
//     the guard's row trigger (ReplicaTriggerName, ENABLE ALWAYS, only when
//     session_replication_role is replica) puts each replicated row through
//     the guard, which refuses it (no token), and the subscription stops
//     with an error. Guard the publisher's table; Audit lists subscriptions
//     into a guarded table.
//   - Prepared transactions (max_prepared_transactions > 0) that wrote a
//     guarded table keep their hold on the fence row across disconnects,
//     idle_in_transaction_session_timeout and restarts, until COMMIT or
//     ROLLBACK PREPARED: newer epochs wait for them. Audit lists them.
package pgtrigger
