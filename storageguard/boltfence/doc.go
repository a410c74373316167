// Package boltfence is a storageguard.Fence in one bbolt file, for a
// resource owner that is a single process: a service that owns its data
// and wants the fence on its own disk, with no server to run.
//
// # Guarantees
//
//   - The admission rule of storageguard (docs/DESIGN.md I4): Do runs the
//     write only under an epoch not older than the resource's highest; a
//     newer epoch waits for the writes still running under the older one,
//     and from then on the older one is refused. Writes under the current
//     epoch run concurrently and touch no disk.
//   - Durability (I5): a raise is one bbolt transaction, fsynced before Do
//     runs the write or Admit returns; reopening the file after a restart
//     or a crash keeps every acknowledged raise, and a high-water mark never
//     goes down.
//   - One process at a time: bbolt locks the file. Open waits up to
//     OpenTimeout for another process to let go, then fails with ErrLocked
//     rather than hang.
//
// # Non-guarantees
//
//   - Not for several processes at once: use storageguard/dirfence (a
//     shared directory) or storageguard/sqlfence (a database).
//   - The fence protects only what is written through it (I7), does not
//     undo a stale leader's earlier changes, and does not fence reads; see
//     package storageguard.
//   - A file on a filesystem that lies about fsync (some network and
//     virtual disks) keeps nothing a power loss can take.
package boltfence
