//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package transport

import "net"

// peekConn cannot peek on this platform; the caller then reads with a short
// deadline.
func peekConn(net.Conn) int { return peekUnknown }
