//go:build linux

package netlab_test

import (
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain also serves the test binary's child roles (re-executed with
// NETLAB_TEST_CHILD set), which the tests start inside lab hosts.
func TestMain(m *testing.M) {
	switch os.Getenv("NETLAB_TEST_CHILD") {
	case "":
		goleak.VerifyTestMain(m)
	case "nsid":
		os.Exit(childNSID(os.Getenv("NETLAB_TEST_ADDR")))
	case "sleep":
		time.Sleep(time.Hour) // a process that stays until killed
		os.Exit(0)
	default:
		// A child test (TestChild*) run with -test.run.
		os.Exit(m.Run())
	}
}

// childNSID listens on addr, prints "ready", and answers each connection
// with the inode of its own network namespace, then exits after the first.
func childNSID(addr string) int {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Println("listen:", err)
		return 1
	}
	fmt.Println("ready")
	c, err := ln.Accept()
	if err != nil {
		return 1
	}
	st, err := os.Stat("/proc/self/ns/net")
	if err != nil {
		return 1
	}
	fmt.Fprintf(c, "%d\n", inode(st))
	c.Close()
	return 0
}
