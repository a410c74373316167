// Package powerfs is a FUSE filesystem that loses, at a power cut, every
// change a program did not make durable: for testing what a program
// promises about power loss by losing the data, not by reading its system
// calls.
//
// A Disk is mounted (Mount, or MountTest in a test) at a directory. Programs
// on it see an ordinary filesystem: reads, writes, creates, renames,
// unlinks, truncates, flock(2) and fcntl(2) locks (kept by the kernel), and
// mmap (bbolt and SQLite in every journal mode run on it). Behind it the
// Disk keeps two states, in this process's memory: what programs see, and
// the disk. Only these reach the disk:
//
//   - fsync(2) or fdatasync(2) of a regular file: its data and its size
//     (both calls alike; mode and times are not modelled);
//   - fsync(2) of a directory: its entries as they are (names created,
//     removed, renamed into or out of it).
//
// Nothing else does: not close(2), not a write to another file, not the
// passing of time, and not fsync of a file for the entry that names it
// (fsync(2) says a directory needs its own fsync, and here it really
// does). A rename is durable once both directories are synced; a new
// file whose data was synced but whose directory was not is gone after a
// cut, and a removed one is back. Each directory's entries on disk are its
// own: a file renamed into a synced directory out of an unsynced one has
// both names after a cut (two files with the same contents); a directory,
// which has one place in a tree, is kept where it is named now.
//
// Cut is the power cut: at one instant every further operation fails with
// EIO; every process on the mount (a file open or mapped there, its
// working directory there, or named with Track) is sent SIGKILL and waited
// for; what was not synced is dropped; and the disk is mounted again at
// the same place. With CutOptions.Torn each 512-byte block of an unsynced
// write, each unsynced size change and each unsynced entry change
// survives or not at random (a write torn at sector granularity, a cache
// written back in part and out of order). A torn size change is lost,
// kept, or kept only as far as its truncation: a file truncated and
// written again (O_TRUNC, then new contents) can come back empty, the
// zero-length file of delayed allocation. What a truncation on disk cut
// off reads back as zeros, and data written past the size on disk is
// not there. FailSync makes a sync fail with
// EIO once, after which the data it covered may or may not be on disk and
// is no longer written by a later sync (Linux since 4.13, the "fsyncgate"
// case). SetSyncDelay makes every sync slow (a slow disk).
//
// # Compared with ext4 and LazyFS
//
// ext4 with data=ordered writes a file's data before the metadata that
// makes it visible, and its fsync of a file commits the journal, which in
// practice also makes every earlier metadata change durable, the file's
// name included. LazyFS (Ramos et al., "When Amnesia Strikes", VLDB 2024)
// drops unsynced file data at a cut but passes metadata operations
// (create, rename, unlink) through to the disk at once. This model is
// stricter than both: unsynced data and unsynced directory entries are
// both lost, and a file's fsync does not save its name. A program that
// survives cuts here survives them on any filesystem that keeps fsync's
// documented promises; one that fails here may still happen to survive
// on ext4.
//
// # Non-guarantees
//
//   - Not a filesystem for data: everything lives in memory and is gone at
//     Unmount. Hard links, symbolic links, device files, extended
//     attributes and renameat2's RENAME_EXCHANGE are not supported.
//   - The kernel keeps the locks, so a lock never outlives the processes
//     that held it (nor a cut).
//   - The calling process must have nothing open on the mount at Cut or
//     Unmount (ErrBusy): a cut ends every process on it, and it cannot end
//     its caller. Run what is to be cut in child processes. The calling
//     process must not mmap a file on the mount either: a page fault that
//     its own FUSE server must answer can stop the Go runtime (a thread
//     in a page fault cannot be preempted for the garbage collector) and
//     hang it, so bbolt and SQLite run on the mount in child processes.
//     Nor should a child be started with its working directory on the
//     mount (exec.Cmd.Dir): it changes directory between fork and exec,
//     a request this process must answer while it is forking, and once
//     hung there for good; let the child enter the mount itself.
//   - Linux only in practice (mount(2) of /dev/fuse as root, no
//     fusermount); tests skip, saying so, where that is missing.
package powerfs
