//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package httpfence

import "net"

// newAliveCheck cannot peek at a socket on this platform: an idle
// connection the backend closed is found out when it is used (and a
// replayable request is then retried on a new one).
func newAliveCheck(net.Conn) func() bool { return func() bool { return true } }
