package netlab

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
)

// Every namespace of a lab is named tfl-PID-START-SEQ-ROLE: the PID and the
// start time (clock ticks since boot, /proc/PID/stat field 22) of the
// process that made it, a counter of labs within that process, and "sw"
// for the switch or "h-NAME" for a host. A lab whose PID is not alive with
// that start time is stale: its maker died without closing it (SIGKILL, a
// crash), and Sweep removes it. The start time keeps a reused PID from
// protecting a dead process's lab.
const namePrefix = "tfl"

var nsNameRE = regexp.MustCompile(`^tfl-([0-9]+)-([0-9]+)-([0-9]+)-(sw|h-[a-z0-9]+)$`)

// hostNameRE is what a host may be called: it becomes part of a namespace
// name.
var hostNameRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,11}$`)

// maxHosts is how many hosts fit in the lab's /24.
const maxHosts = 250

// labPrefix is the name every namespace of one lab starts with.
func labPrefix(pid int, start uint64, seq uint64) string {
	return fmt.Sprintf("%s-%d-%d-%d", namePrefix, pid, start, seq)
}

// parseNSName splits a lab namespace name; ok is false for any other name.
func parseNSName(name string) (pid int, start uint64, ok bool) {
	m := nsNameRE.FindStringSubmatch(name)
	if m == nil {
		return 0, 0, false
	}
	p, err1 := strconv.Atoi(m[1])
	s, err2 := strconv.ParseUint(m[2], 10, 64)
	if err1 != nil || err2 != nil || p <= 0 {
		return 0, 0, false
	}
	return p, s, true
}

// Subnet is the network every lab uses: 198.18.0.0/24, inside
// 198.18.0.0/15, the range RFC 2544 reserves for benchmarking networks.
// Labs do not share it: each lab is its own switch, and nothing routes
// between labs or out of them.
var Subnet = netip.MustParsePrefix("198.18.0.0/24")

// hostAddr is the address of the i-th host (from 0): 198.18.0.(i+1).
func hostAddr(i int) netip.Addr {
	b := Subnet.Addr().As4()
	b[3] = byte(i + 1)
	return netip.AddrFrom4(b)
}
