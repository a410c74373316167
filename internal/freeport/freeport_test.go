package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestAddrs: distinct, bindable, below the ephemeral range.
func TestAddrs(t *testing.T) {
	addrs, err := Addrs(50)
	if err != nil {
		t.Fatal(err)
	}
	lo := ephemeralLow()
	seen := map[string]bool{}
	for _, a := range addrs {
		if seen[a] {
			t.Fatalf("%s returned twice", a)
		}
		seen[a] = true
		_, ps, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.Atoi(ps)
		if lo > lowest+attempts && (p < lowest || p >= lo) {
			t.Errorf("%s: port outside [%d, %d)", a, lowest, lo)
		}
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("%s cannot be bound: %v", a, err)
		}
		ln.Close()
	}
}

// TestTakenPortSkipped: within a window of five ports, four held by this
// test, pick returns the fifth every time, and never a held one; with all
// five held it falls back to a port the kernel chooses.
func TestTakenPortSkipped(t *testing.T) {
	var held []net.Listener
	defer func() {
		for _, ln := range held {
			ln.Close()
		}
	}()
	// A window of five free ports below the ephemeral range.
	var lo int
	for p := lowest + 1000; p+5 < ephemeralLow(); p += 5 {
		ok := true
		for q := p; q < p+5; q++ {
			if !free(net.JoinHostPort("127.0.0.1", strconv.Itoa(q))) {
				ok = false
				break
			}
		}
		if ok {
			lo = p
			break
		}
	}
	if lo == 0 {
		t.Skip("no window of five free ports below the ephemeral range")
	}
	for q := lo; q < lo+4; q++ {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(q)))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ln)
	}
	want := net.JoinHostPort("127.0.0.1", strconv.Itoa(lo+4))
	for range 20 {
		a, err := pick(lo, lo+4, map[string]bool{})
		if err != nil {
			t.Fatal(err)
		}
		if a != want {
			t.Fatalf("pick in a window with %s free returned %s", want, a)
		}
	}
	// Already returned by this call (seen): the kernel's choice instead.
	a, err := pick(lo, lo+4, map[string]bool{want: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, ps, _ := net.SplitHostPort(a); ps == strconv.Itoa(lo+4) || a == "" {
		t.Fatalf("pick with every port of the window taken returned %s", a)
	}
	if _, err := Addrs(-1); err == nil {
		t.Fatal("Addrs(-1) succeeded")
	}
}
