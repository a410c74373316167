//go:build linux || darwin || freebsd || netbsd || openbsd

package storageguard

import (
	"errors"
	"net"
	"syscall"
)

// connAlive reports whether an idle backend connection can take a request:
// the backend has not closed it (EOF) or reset it, and has sent nothing
// unasked. It peeks at the socket without blocking and without consuming
// anything: one system call.
func connAlive(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	var buf [1]byte
	err = rc.Read(func(fd uintptr) bool {
		n, _, rerr := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// Nothing to read is the healthy case; EOF (0, nil), an error or
		// unasked bytes are not.
		alive = n <= 0 && (errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK))
		return true
	})
	return err == nil && alive
}
