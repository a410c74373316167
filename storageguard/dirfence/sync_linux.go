package dirfence

import (
	"os"

	"golang.org/x/sys/unix"
)

// datasync makes f's data durable: fdatasync(2), which skips metadata (the
// modification time) that a fence file does not need.
func datasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}
