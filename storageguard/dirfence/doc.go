// Package dirfence is a storageguard.Fence in a directory of small files
// locked with flock(2), for several processes — on one machine, or on
// several sharing a disk — that guard the same resources without a
// database.
//
// Unix only: the package builds on every platform, but Open, OpenWith,
// Fence and Options exist only on unix systems that have flock(2) (all that
// Go supports except AIX); elsewhere the package is empty.
//
// # Guarantees
//
//   - The admission rule of storageguard (docs/DESIGN.md I4), between
//     processes: the flock on a resource's fence file is held shared while
//     writes under the current epoch run and exclusively for a raise, so a
//     newer epoch, from any process, waits for the writes still running
//     under the older one, and from then on the older one is refused
//     everywhere. Writes under the current epoch run concurrently; while a
//     process holds a resource's shared lock (it keeps it Options.Linger
//     after the last write) they make no system call.
//   - A waiting raise is not starved by busy writers: writers yield to it
//     within about Options.Probe.
//   - Durability (I5): a raise is written in place into one of two
//     checksummed slots and fdatasynced (the first one is renamed into place
//     and the directory fsynced) before Do runs the write or Admit returns.
//     A torn write falls back to the previous slot; a record another process
//     wrote is synced before it is trusted. Open fsyncs the directory that
//     names the fence directory, and each ancestor's, whether or not it
//     created them: a directory that exists may not be on disk yet.
//   - A raise whose write or sync fails is taken back before anyone can act
//     on it: the slot's previous bytes are written back under the
//     exclusive lock (a first file whose directory fsync failed is
//     unlinked), the descriptor is closed and the file opened anew, so
//     neither this process nor another trusts a record that may not be on
//     disk; the raise returns the error.
//   - Any resource name is safe: file names are an encoding of it, so none
//     reaches outside the directory. Every file is opened relative to the
//     directory the fence opened, never through a symbolic link
//     (O_NOFOLLOW; ErrNotRegular for a link, FIFO or device planted in the
//     directory), and created with mode 0600 unless Options.FileMode says
//     otherwise.
//
// # Non-guarantees
//
//   - The filesystem must implement flock(2) between all the processes
//     involved (local filesystems do; NFS needs working locking), and fsync
//     must reach stable storage.
//   - A raise by another process waits for the writes in flight plus up to
//     about one probe interval; a write under the current epoch queued
//     behind such a raise waits too, and a raise waiting for in-flight
//     writes does not give up when its context ends (flock(2) and the
//     process's own lock cannot be interrupted). The hold itself never
//     depends on the context.
//   - The fence directory must be its own: Open refuses one that holds
//     other files (ErrNotOwnDirectory), such as the application's data.
//   - Every process must run this protocol; a file changed from outside the
//     fence is detected as corrupt or re-read, not repaired.
//   - The fence protects only what is written through it (I7), does not
//     undo a stale leader's earlier changes, and does not fence reads; see
//     package storageguard.
package dirfence
