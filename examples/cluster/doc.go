// Command cluster is termfence's runnable example: a three-node Raft cluster
// whose leaders carry their Raft term as a fencing token (an epoch), and a
// store outside the consensus group that refuses any token older than the
// newest it has seen.
//
// Usage:
//
//	cluster [-scenario NAME] [flags]  one case of the fencing story (README.md) on a real
//	                                  three-node cluster (default: paused)
//	cluster -scenario list            the cases: paused, short-pause,
//	                                  audit-log, restart, two-resources,
//	                                  half-done, stale-read, efficiency,
//	                                  gc-pause, lab, object-store (a
//	                                  versitygw S3 server, objectfence)
//	cluster -lab                      = -scenario lab: three machines, each
//	                                  a Linux network namespace (root only)
//	cluster node  [flags]             one Raft node per process, with its
//	                                  HTTP API and a live status page at /
//	cluster store [flags]             the fenced store
//	cluster help                      the usage
//
// README.md documents every command, flag, scenario and endpoint, with
// copy-paste commands. Each scenario ends with one line
// "summary: scenario=NAME ... ok=true|false" counted from the run; -svg
// draws the run's timeline.
//
// # Guarantees
//
//   - A node stamps a write only with an epoch it held (election.Epoch, the
//     triple read of docs/DESIGN.md I1) when the write was decided; the
//     token is HMAC-signed with -token-key.
//   - The store admits a write only through storageguard: the token is
//     verified (signature, form, cluster) before the fence sees it, and the
//     fence's check and raise happen in the same step as the record write
//     (one SQLite transaction with sqlfence's Tx; inside boltfence's Do
//     with httpfence.Middleware; with -backend postgres-trigger, in the
//     database, by storageguard/pgtrigger's trigger on the records table,
//     which the store's transactions present the token to). Once it has
//     accepted epoch E for a resource it refuses every older epoch for it,
//     across restarts and crashes.
//   - With -backend postgres-trigger every write to the records table is
//     checked by PostgreSQL, whoever makes it (a batch job, psql, another
//     service), against one high-water mark for the whole table
//     (-scenario every-write-path), as long as it writes with a role that
//     is no superuser and owns none of the tables.
//   - With -tls-cert/-tls-key/-tls-ca, Raft and the node's HTTP API accept
//     only peers and clients with a certificate from the cluster's CA; on
//     the Raft port the certificate must also name the server ID the peer
//     speaks for (URI SAN urn:termfence:server:<id>, both serverAuth and
//     clientAuth), so an operator's client-only certificate reaches the API
//     but cannot vote, append or join (README.md gives the openssl
//     commands, which TestREADMECertificates runs).
//   - The node's state-changing endpoints take only application/json from no
//     Origin or their own, so a web page cannot drive them; /join refuses
//     malformed addresses and IDs or addresses of other members, /remove the
//     last voter. No endpoint hands out a signed token.
//
// # Non-guarantees
//
//   - A deposed or paused leader still writes: the -write-every writer makes
//     one last write with its old token when it learns its epoch is gone (as
//     a paused process would). Only the store's fence makes that harmless;
//     with -unfenced it is not.
//   - Writes with -backend sqlite or bolt are fenced only through the
//     store's API: anything writing the file directly goes around the fence.
//   - Reads are not fenced. The store speaks plain HTTP. Without -token-key
//     tokens are unsigned and anyone who reaches the store can forge an
//     epoch (a warning is logged).
//   - Terms restart at 1 in a new cluster: a store that remembers a wiped
//     cluster's terms refuses the new one's leaders. Use a new store file or
//     -cluster name with new node data directories.
//   - In the in-process scenarios the pause is injected (the work waits on
//     a channel, the Raft node is cut off by transport.Faulty); gc-pause
//     stops a whole node process with SIGSTOP; lab runs the node processes
//     on hosts of their own (internal/netlab) and partitions them in the
//     kernel. Everything else is real.
//   - The node's HTTP API authenticates no one without mutual TLS: any local
//     program can call it on loopback.
package main
