// Package redisfence puts the fence inside Redis: a function library
// (Redis 7 Functions, loaded by Install) verifies a leader's token, applies
// the admission rule to a fence key, raises it and runs the leader's
// commands, in one function call, which Redis runs atomically. A paused or
// deposed leader's late write through the library is refused by Redis
// itself, whatever the leader's process believes.
//
//	err := redisfence.Install(ctx, admin, redisfence.Config{Cluster: "payments", HMACKey: key})
//	f, err := redisfence.Open(ctx, leaders, redisfence.Options{Admin: admin})
//	replies, err := f.Do(ctx, "{acct:42}:fence", token, []string{"{acct:42}:balance"},
//		redisfence.Cmd{"INCRBY", "{acct:42}:balance", 100})
//
// # What one call does
//
// FCALL <lib>_write with the fence key, the data keys, the token and the
// commands:
//
//  1. checks the call's shape (every command non-empty, none naming the
//     fence key) before anything else;
//  2. verifies the token as docs/TOKEN.md says, in Lua: HMAC-SHA256 under
//     the cluster key the token names ("hs256": Config.HMACKey;
//     "hs256.<key ID>": that key of Config.HMACKeys, for rotation);
//     unsigned tokens are refused, and so are Ed25519 ones (Redis's Lua has
//     no Ed25519; Install refuses a config without an HMAC key, ErrNoKey);
//  3. refuses another cluster's epoch (storageguard.ErrForeignCluster), an
//     older one (ErrStale), the highest term with another leader
//     (ErrConflict), a fence key that holds no epoch (ErrCorrupt);
//  4. raises the fence key to the token's epoch when it is newer, and runs
//     the commands, returning their replies.
//
// A refused call writes nothing. Refusals of unauthenticated tokens name
// nothing of the fence. A command that fails stops the call
// (*CommandError); as in MULTI/EXEC, the raise and the commands before it
// stay.
//
// Tokens that verified are cached in the library's Lua state (bounded,
// Config.CacheSize): a leader's writes after its first skip the HMAC. The
// cache says only that a token is authentic; every call still checks it
// against the fence key.
//
// # Redis Cluster
//
// A function's keys must share a hash slot: give the fence key and the
// data keys one hash tag, "{acct:42}:fence" and "{acct:42}:balance" (only
// the part in braces is hashed). One fence key then guards the keys of its
// slot-mate tag. Install loads the library on every master.
//
// # Durability
//
// Open refuses a server without appendonly yes and appendfsync always
// (ErrNotDurable): Redis then syncs its append-only file before it
// replies, so a raise Do returned is on disk. Redis 7.0 creates its
// appendonlydir without syncing the directory above it: create
// <dir>/appendonlydir yourself and sync both before the first start, or a
// power cut soon after it loses the whole file (tests
// TestPowerCutLosesNoAcknowledgedRaise, TestSIGKILLLosesNoAcknowledgedRaise).
// A cut can also tear the file's last command, one never acknowledged;
// redis-server then refuses to start ("Bad file format reading the append
// only file") until redis-check-aof --fix cuts that tail off, which loses
// nothing a client was told had happened.
//
// # The leaders' user
//
// Redis runs a function's commands with the caller's ACL permissions. So
// the leaders' user (LeaderUser, ACLRule) gets FCALL and FCALL_RO, the data
// commands its writes run, on the keys they need — and no FUNCTION,
// SCRIPT, EVAL, DEBUG, CONFIG, MODULE, ACL, FLUSHALL or CLIENT: it cannot
// read the library's code (which holds values derived from the key, as
// good as the key for signing) nor load a library of its own (test
// TestLeaderUserCannotReadTheKey). Audit reports what weakens the fence.
//
// # Guarantees
//
// Against a client of the leaders' user that writes through the library:
// no command of a call runs unless the call's token verified under the
// cluster's key and its epoch was not older than the fence key's, nor of
// the same term and another leader; a newer epoch is on disk before its
// commands run and before the reply; the check, the raise and the commands
// are one atomic step (no other command runs between them).
//
// # Non-guarantees: what Redis cannot enforce
//
//   - Direct writes. The leaders' user may run the data commands itself,
//     around the function (Redis checks a function's commands against the
//     caller's ACL, so it must be allowed them), and may write the fence
//     key directly: lower it, delete it, or set it to garbage (which closes
//     the resource, ErrCorrupt). The fence stops what the essay is about —
//     a paused or deposed leader whose late write goes through the
//     function — not a leader that bypasses it.
//   - The default user, an administrator, and any user allowed FUNCTION,
//     SCRIPT, EVAL, DEBUG, CONFIG or MODULE can read the key, replace the
//     library, or write anything. Turn the default user off or give it a
//     password (Audit reports it).
//   - FLUSHALL, FLUSHDB, FUNCTION FLUSH or a restore remove the fence keys
//     (and the library): every resource starts again from no epoch.
//   - Failover to a replica that lacks the last raise (replication is
//     asynchronous; WAIT does not make it synchronous) lets an older
//     leader's write through. Use one primary, or WAITAOF on Redis 7.2.
//   - A setting changed after Open (appendfsync everysec, appendonly no)
//     makes raises lossy again; Audit reports it, Open does not see it.
//   - The key leaves the Go process in the library's code: it is in the
//     server's memory, its AOF and RDB files, FUNCTION DUMP, and on the
//     wire of Install (use TLS).
//   - Reads are not fenced (Check is a fenced read: a read after it may
//     still be stale by the time it is used).
//   - go-redis retries a command on some network errors (MaxRetries):
//     a retried write may run twice. Set MaxRetries to -1 where that
//     matters.
//   - A token is not a secret: whoever sees the current token and may call
//     the function can write under it until a newer epoch is seen.
package redisfence
