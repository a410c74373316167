//go:build linux || darwin || freebsd || netbsd || openbsd

package httpfence

import (
	"net"
	"syscall"
)

// newAliveCheck returns the check of whether an idle backend connection c
// can take a request: the backend has not closed it (EOF) or reset it, and
// has sent nothing unasked. The check peeks at the socket without blocking
// and without consuming anything: one system call, and no allocation (it
// is made once per connection; a pooled connection is checked by one
// goroutine at a time).
func newAliveCheck(c net.Conn) func() bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return func() bool { return true }
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return func() bool { return false }
	}
	var (
		alive bool
		buf   [1]byte
	)
	peek := func(fd uintptr) bool {
		n, _, rerr := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// Nothing to read is the healthy case; EOF (0, nil), an error or
		// unasked bytes are not.
		alive = n <= 0 && (rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK)
		return true
	}
	return func() bool {
		alive = false
		return rc.Read(peek) == nil && alive
	}
}
