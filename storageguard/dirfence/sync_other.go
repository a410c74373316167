//go:build unix && !aix && !linux

package dirfence

import "os"

// datasync makes f's data durable. Without fdatasync(2) it is f.Sync: fsync,
// and on macOS F_FULLFSYNC, which also flushes the drive's cache.
func datasync(f *os.File) error { return f.Sync() }
