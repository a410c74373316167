//go:build linux

package netlab_test

import (
	"os"
	"syscall"
)

func inode(st os.FileInfo) uint64 { return st.Sys().(*syscall.Stat_t).Ino }
