// Package freeport picks loopback TCP addresses for processes that must be
// told their address before they start (cluster members given each other's
// Raft addresses for -bootstrap) or that restart on the address they had
// (a store killed and started again by a fault test).
//
// Picking a port by listening on port 0 and closing the listener, as such
// code often does, races with every other process on the machine: the
// kernel hands that same range out as the source port of outgoing
// connections and to other listeners on port 0, so under `go test ./...`
// a port picked that way is now and then taken before the process binds it
// (a node that exits with "address already in use"). This package picks at
// random below the kernel's ephemeral range (net.ipv4.ip_local_port_range),
// which the kernel never hands out on its own, and checks each port by
// binding it.
//
// Guarantees: the addresses returned by one call are distinct and each was
// free when checked; none lies in the ephemeral range unless that range
// leaves no room below it (then it falls back to port 0). Non-guarantees:
// it reserves nothing — another process picking explicitly can still take
// a port first, which the later bind reports.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowest is the lowest port picked: below it live well-known and
// registered services.
const lowest = 10000

// attempts bounds the random tries for one port before falling back to
// port 0.
const attempts = 200

// Addrs returns n distinct addresses "127.0.0.1:port" that were free a
// moment ago, outside the kernel's ephemeral port range.
func Addrs(n int) ([]string, error) {
	if n < 0 {
		return nil, errors.New("freeport: negative count")
	}
	hi := ephemeralLow() - 1
	seen := map[string]bool{}
	out := make([]string, 0, n)
	for len(out) < n {
		addr, err := pick(lowest, hi, seen)
		if err != nil {
			return nil, err
		}
		seen[addr] = true
		out = append(out, addr)
	}
	return out, nil
}

// Addr returns one address as Addrs does.
func Addr() (string, error) {
	a, err := Addrs(1)
	if err != nil {
		return "", err
	}
	return a[0], nil
}

// Port returns the port of one address as Addrs does.
func Port() (int, error) {
	a, err := Addr()
	if err != nil {
		return 0, err
	}
	_, p, _ := net.SplitHostPort(a)
	return strconv.Atoi(p)
}

// pick returns a free address with a port in lo..hi not in seen, at random;
// if there is none to be found there, one the kernel chooses.
func pick(lo, hi int, seen map[string]bool) (string, error) {
	if hi >= lo {
		for range attempts {
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(lo+rand.IntN(hi-lo+1)))
			if seen[addr] || !free(addr) {
				continue
			}
			return addr, nil
		}
	}
	// No room below the ephemeral range, or all tries taken: let the
	// kernel choose, as before this package.
	for range attempts {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", fmt.Errorf("freeport: %w", err)
		}
		addr := ln.Addr().String()
		ln.Close()
		if !seen[addr] {
			return addr, nil
		}
	}
	return "", errors.New("freeport: no free port found")
}

// free reports whether addr can be listened on now.
func free(addr string) bool {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// ephemeralLow is the low end of the kernel's ephemeral port range; where
// it cannot be read, Linux's default (32768).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return lo
}
