//go:build linux

package netlab_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/termfence/termfence/internal/netlab"
	"github.com/termfence/termfence/internal/netlab/netlabtest"

	"github.com/termfence/termfence/internal/testwait"
)

const port = 7000

// silentWait is how long a dial that should go unanswered is given: far
// beyond a veth round trip (microseconds), far below TCP's SYN
// retransmission budget.
const silentWait = 600 * time.Millisecond

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// ipOut runs ip with args in the namespace New was called from.
func ipOut(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// rootState is what the test's own namespace shows: links, addresses,
// routes of every table, rules, and the named namespaces.
func rootState(t *testing.T) map[string][]string {
	t.Helper()
	lines := func(s string) []string {
		var out []string
		for _, l := range strings.Split(s, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, l)
			}
		}
		return out
	}
	return map[string][]string{
		"ip link":                 lines(ipOut(t, "-o", "link", "show")),
		"ip addr":                 lines(ipOut(t, "-o", "addr", "show")),
		"ip route show table all": lines(ipOut(t, "route", "show", "table", "all")),
		"ip rule":                 lines(ipOut(t, "rule", "show")),
		"ip netns list":           lines(ipOut(t, "netns", "list")),
	}
}

// labTrace matches anything a lab could leave in the root namespace: its
// addresses, its interface names, its namespace names.
func labTrace(lab string) *regexp.Regexp {
	return regexp.MustCompile(`198\.1[89]\.|` + regexp.QuoteMeta(lab) + `|: (br0|p[0-9]+|eth0@)`)
}

// checkNoTrace fails if after differs from before by a line a lab could
// have made. Other processes (other test packages building their own
// namespaces) may change the root namespace meanwhile; lines that cannot
// be a lab's are only logged.
func checkNoTrace(t *testing.T, when string, before, after map[string][]string, trace *regexp.Regexp) {
	t.Helper()
	for what, b := range before {
		a := after[what]
		for _, l := range a {
			if !slices.Contains(b, l) {
				if trace.MatchString(l) {
					t.Errorf("%s: `%s` shows a line of the lab: %s", when, what, l)
				} else {
					t.Logf("%s: `%s` has a new line (another process?): %s", when, what, l)
				}
			}
		}
		for _, l := range b {
			if !slices.Contains(a, l) && trace.MatchString(l) {
				t.Errorf("%s: `%s` lost a line: %s", when, what, l)
			}
		}
	}
}

// server accepts connections on h's port and keeps them until the test
// ends; conns receives each.
type server struct {
	ln    net.Listener
	conns chan net.Conn
	wg    sync.WaitGroup
}

func serve(t *testing.T, h *netlab.Host) *server {
	t.Helper()
	ln, err := h.Listen(ctxT(t, 10*time.Second), "tcp", h.HostPort(port))
	if err != nil {
		t.Fatalf("listen on %v: %v", h, err)
	}
	s := &server{ln: ln, conns: make(chan net.Conn, 256)}
	var mu sync.Mutex
	var all []net.Conn
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			all = append(all, c)
			mu.Unlock()
			select {
			case s.conns <- c:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.wg.Wait()
		mu.Lock()
		for _, c := range all {
			c.Close()
		}
		mu.Unlock()
	})
	return s
}

// dial returns what a TCP connection attempt from h to addr saw: "ok",
// "timeout" (nothing came back within wait), or the errno's name.
func dial(h *netlab.Host, addr string, wait time.Duration) string {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c, err := h.DialContext(ctx, "tcp", addr)
	if err == nil {
		c.Close()
		return "ok"
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return "timeout"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return unix.ErrnoName(errno)
	}
	return err.Error()
}

// matrix dials every ordered pair at once and returns got[from][to].
func matrix(hosts []*netlab.Host, exp [][]string) [][]string {
	got := make([][]string, len(hosts))
	var wg sync.WaitGroup
	for i := range hosts {
		got[i] = make([]string, len(hosts))
		for j := range hosts {
			if i == j {
				continue
			}
			wait := 10 * time.Second
			if exp != nil && exp[i][j] != "ok" {
				wait = silentWait
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i][j] = dial(hosts[i], hosts[j].HostPort(port), wait)
			}()
		}
	}
	wg.Wait()
	return got
}

func allOK(n int) [][]string {
	m := make([][]string, n)
	for i := range m {
		m[i] = make([]string, n)
		for j := range m[i] {
			if i != j {
				m[i][j] = "ok"
			}
		}
	}
	return m
}

// with returns the all-ok matrix with the given entries "from>to=outcome".
func with(n int, names []string, entries ...string) [][]string {
	m := allOK(n)
	idx := func(s string) int { return slices.Index(names, s) }
	for _, e := range entries {
		pair, out, _ := strings.Cut(e, "=")
		a, b, _ := strings.Cut(pair, ">")
		m[idx(a)][idx(b)] = out
	}
	return m
}

func checkMatrix(t *testing.T, what string, hosts []*netlab.Host, exp [][]string) {
	t.Helper()
	got := matrix(hosts, exp)
	for i := range hosts {
		for j := range hosts {
			if i != j && got[i][j] != exp[i][j] {
				t.Errorf("%s: %s -> %s: %s, want %s", what, hosts[i].Name(), hosts[j].Name(), got[i][j], exp[i][j])
			}
		}
	}
}

// flushNeigh empties every host's ARP cache, so each check resolves
// addresses afresh.
func flushNeigh(t *testing.T, lab *netlab.Lab) {
	t.Helper()
	for _, h := range lab.Hosts() {
		ipOut(t, "-n", h.Namespace(), "neigh", "flush", "all")
	}
}

// TestLab is the lab's contract end to end: three hosts that reach each
// other over TCP and nothing else, each kind of fault with its observable
// effect on new connections (success, refusal at once with the errno the
// mode names, or silence) and on established ones, heal, and after Close
// nothing of the lab in `ip netns list`, `ip link`, addresses, routes or
// rules — and nothing of it in the test's own namespace at any time.
func TestLab(t *testing.T) {
	t.Parallel()
	netlabtest.Require(t)
	before := rootState(t)
	lab, err := netlab.New(ctxT(t, time.Minute), netlab.Config{Hosts: netlab.Names("h", 3)})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			lab.Close()
		}
	})
	trace := labTrace(lab.Name())
	names := []string{"h1", "h2", "h3"}
	hosts := lab.Hosts()
	h1, h2, h3 := hosts[0], hosts[1], hosts[2]

	// The lab exists only in its own namespaces.
	ns := ipOut(t, "netns", "list")
	for _, n := range lab.Namespaces() {
		if !strings.Contains(ns, n) {
			t.Errorf("ip netns list does not show %s:\n%s", n, ns)
		}
	}
	during := rootState(t)
	delete(during, "ip netns list")
	checkNoTrace(t, "while the lab runs", before, during, trace)

	for i, h := range hosts {
		if want := fmt.Sprintf("198.18.0.%d", i+1); h.Addr().String() != want {
			t.Errorf("%s has address %v, want %s", h.Name(), h.Addr(), want)
		}
		routes := ipOut(t, "-n", h.Namespace(), "route", "show", "table", "all")
		if strings.Contains(routes, "default") {
			t.Errorf("%s has a default route:\n%s", h.Name(), routes)
		}
		addrs := ipOut(t, "-n", h.Namespace(), "-o", "addr", "show")
		for _, l := range strings.Split(strings.TrimSpace(addrs), "\n") {
			if !strings.Contains(l, "inet 127.0.0.1/8") && !strings.Contains(l, "inet "+h.Addr().String()+"/24") {
				t.Errorf("%s has an address outside 198.18.0.0/24 and loopback: %s", h.Name(), l)
			}
		}
		// Nothing is sent: route get only asks the kernel.
		out, err := exec.Command("ip", "-n", h.Namespace(), "route", "get", "192.0.2.1").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "unreachable") {
			t.Errorf("%s has a route out of the lab: %v %s", h.Name(), err, out)
		}
		if lo := ipOut(t, "-n", h.Namespace(), "link", "show", "lo"); !strings.Contains(lo, "UP") {
			t.Errorf("%s: loopback not up: %s", h.Name(), lo)
		}
	}

	servers := make([]*server, len(hosts))
	for i, h := range hosts {
		servers[i] = serve(t, h)
	}
	checkMatrix(t, "healthy", hosts, allOK(3))

	ctx := ctxT(t, 5*time.Minute)
	for _, tc := range []struct {
		name  string
		apply func() error
		want  [][]string
	}{
		{"isolate h1", func() error { return lab.Isolate(h1) },
			with(3, names, "h1>h2=timeout", "h1>h3=timeout", "h2>h1=timeout", "h3>h1=timeout")},
		{"block h1->h2 silent", func() error { return lab.Block(ctx, h1, h2, netlab.Silent) },
			with(3, names, "h1>h2=timeout", "h2>h1=timeout")},
		{"block h1->h2 unreachable", func() error { return lab.Block(ctx, h1, h2, netlab.Unreachable) },
			with(3, names, "h1>h2=EHOSTUNREACH", "h2>h1=timeout")},
		{"block h1->h2 prohibited", func() error { return lab.Block(ctx, h1, h2, netlab.Prohibited) },
			with(3, names, "h1>h2=EACCES", "h2>h1=timeout")},
		{"block h1->h2 refused", func() error { return lab.Block(ctx, h1, h2, netlab.Refused) },
			with(3, names, "h1>h2=ECONNREFUSED", "h2>h1=timeout")},
		// h1 owns h2's address on its loopback; with h2 gone, h3's ARP
		// for h2 must go unanswered (arp_ignore), not be answered by h1,
		// whose kernel would then refuse h3's connection in h2's name.
		{"block h1->h2 refused, h2 isolated", func() error {
			return errors.Join(lab.Block(ctx, h1, h2, netlab.Refused), lab.Isolate(h2))
		}, with(3, names, "h1>h2=ECONNREFUSED", "h2>h1=timeout", "h2>h3=timeout", "h3>h2=timeout")},
		{"partition h1 | h2 h3 silent", func() error {
			return lab.Partition(ctx, netlab.Silent, []*netlab.Host{h1}, []*netlab.Host{h2, h3})
		}, with(3, names, "h1>h2=timeout", "h1>h3=timeout", "h2>h1=timeout", "h3>h1=timeout")},
		{"partition h1 | h2 h3 refused", func() error {
			return lab.Partition(ctx, netlab.Refused, []*netlab.Host{h1}, []*netlab.Host{h2, h3})
		}, with(3, names, "h1>h2=ECONNREFUSED", "h1>h3=ECONNREFUSED", "h2>h1=ECONNREFUSED", "h3>h1=ECONNREFUSED")},
		{"partition h1 h2 | h3 unreachable", func() error {
			return lab.Partition(ctx, netlab.Unreachable, []*netlab.Host{h1, h2}, []*netlab.Host{h3})
		}, with(3, names, "h1>h3=EHOSTUNREACH", "h2>h3=EHOSTUNREACH", "h3>h1=EHOSTUNREACH", "h3>h2=EHOSTUNREACH")},
		{"partition h2 | h3 prohibited, h1 in neither side", func() error {
			return lab.Partition(ctx, netlab.Prohibited, []*netlab.Host{h2}, []*netlab.Host{h3})
		}, with(3, names, "h2>h3=EACCES", "h3>h2=EACCES")},
	} {
		flushNeigh(t, lab)
		if err := tc.apply(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		t.Logf("%s: faults %q", tc.name, lab.Faults())
		checkMatrix(t, tc.name, hosts, tc.want)
		if err := lab.Heal(ctx); err != nil {
			t.Fatalf("%s: heal: %v", tc.name, err)
		}
		if f := lab.Faults(); len(f) != 0 {
			t.Errorf("%s: faults after Heal: %q", tc.name, f)
		}
		flushNeigh(t, lab)
		checkMatrix(t, tc.name+", healed", hosts, allOK(3))
	}

	// Established connections.
	established := func(from *netlab.Host, to int) (client, server net.Conn) {
		t.Helper()
		c, err := from.DialContext(ctx, "tcp", hosts[to].HostPort(port))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		timeout := time.After(testwait.Bound(10 * time.Second))
		for {
			select {
			case s := <-servers[to].conns:
				if s.RemoteAddr().String() == c.LocalAddr().String() {
					return c, s
				}
			case <-timeout:
				t.Fatal("no accepted connection")
			}
		}
	}
	// Silent, isolated, or dropped at the sender by a route: what h1
	// sends is held back, and arrives after the heal (TCP retransmits
	// it): a late packet, as on a real network.
	for _, fault := range []struct {
		name  string
		apply func() error
	}{
		{"block h1->h2 silent", func() error { return lab.Block(ctx, h1, h2, netlab.Silent) }},
		{"isolate h1", func() error { return lab.Isolate(h1) }},
		{"block h1->h2 unreachable", func() error { return lab.Block(ctx, h1, h2, netlab.Unreachable) }},
		{"block h1->h2 prohibited", func() error { return lab.Block(ctx, h1, h2, netlab.Prohibited) }},
	} {
		c, s := established(h1, 1)
		if err := fault.apply(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("late\n")); err != nil {
			t.Fatalf("%s: write: %v", fault.name, err)
		}
		s.SetReadDeadline(time.Now().Add(silentWait))
		if n, err := s.Read(make([]byte, 16)); err == nil || !os.IsTimeout(err) {
			t.Errorf("%s: h2 read %d bytes, %v, while blocked; want a timeout", fault.name, n, err)
		}
		if err := lab.Heal(ctx); err != nil {
			t.Fatal(err)
		}
		s.SetReadDeadline(time.Now().Add(20 * time.Second))
		line, err := bufio.NewReader(s).ReadString('\n')
		if err != nil || line != "late\n" {
			t.Errorf("%s: after heal h2 read %q, %v; want the late write", fault.name, line, err)
		}
	}
	// Refused: h1's established connection to h2 is reset.
	c, _ := established(h1, 1)
	if err := lab.Block(ctx, h1, h2, netlab.Refused); err != nil {
		t.Fatal(err)
	}
	_, werr := c.Write([]byte("x\n"))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, rerr := c.Read(make([]byte, 1))
	if !errors.Is(werr, syscall.ECONNRESET) && !errors.Is(rerr, syscall.ECONNRESET) {
		t.Errorf("refused: established connection: write %v, read %v; want ECONNRESET", werr, rerr)
	}
	if err := lab.Heal(ctx); err != nil {
		t.Fatal(err)
	}

	// Close, and nothing is left.
	for _, s := range servers {
		s.ln.Close()
	}
	labNS := lab.Namespaces()
	if err := lab.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	closed = true
	after := rootState(t)
	for _, n := range labNS {
		if slices.ContainsFunc(after["ip netns list"], func(l string) bool { return strings.HasPrefix(l, n) }) {
			t.Errorf("after Close, ip netns list shows %s", n)
		}
		if _, err := os.Stat("/run/netns/" + n); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after Close, /run/netns/%s: %v", n, err)
		}
	}
	checkNoTrace(t, "after Close", before, after, trace)
	if err := lab.Heal(ctx); !errors.Is(err, netlab.ErrClosed) {
		t.Errorf("Heal after Close: %v, want ErrClosed", err)
	}
	if err := h1.Do(func() error { return nil }); !errors.Is(err, netlab.ErrClosed) {
		t.Errorf("Do after Close: %v, want ErrClosed", err)
	}
	if err := lab.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
