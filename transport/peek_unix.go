//go:build linux || darwin || freebsd || netbsd || openbsd

package transport

import (
	"errors"
	"net"
	"syscall"
)

// peekConn looks at c's socket without reading from it and without
// waiting (recv with MSG_PEEK and MSG_DONTWAIT).
func peekConn(c net.Conn) int {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return peekUnknown
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return peekUnknown
	}
	var n int
	var rerr error
	if err := rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, rerr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true // one look, never wait
	}); err != nil {
		return peekClosed
	}
	switch {
	case errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK) || errors.Is(rerr, syscall.EINTR):
		return peekEmpty
	case rerr != nil || n == 0:
		return peekClosed
	}
	return peekData
}
