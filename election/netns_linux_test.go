//go:build linux

package election

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// netnsLab is a few hosts on one Ethernet segment, each its own Linux
// network namespace, made and removed by the test: hosts h1..hN with veth
// links to a bridge in a switch namespace, addresses 198.18.X.1..N/24
// (198.18.0.0/15 is reserved for benchmarking, RFC 2544). Code runs "on" a
// host through do, which enters the host's namespace on a locked OS thread
// that dies with the call; a socket keeps the namespace it was made in.
type netnsLab struct {
	t      *testing.T
	prefix string
	hosts  []*nsHost
}

type nsHost struct {
	lab  *netnsLab
	name string // namespace name
	ip   string
	ns   *os.File
}

// newNetnsLab makes n hosts, or skips the test when this machine cannot
// (not root, no ip from iproute2, no network namespaces).
func newNetnsLab(t *testing.T, n int) *netnsLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip (iproute2)")
	}
	l := &netnsLab{t: t, prefix: fmt.Sprintf("tf%05d", rand.IntN(100000))}
	sub := rand.IntN(256)
	sw := l.prefix + "sw"
	t.Cleanup(func() {
		for _, h := range l.hosts {
			if h.ns != nil {
				_ = h.ns.Close()
			}
			_ = exec.Command("ip", "netns", "del", h.name).Run()
		}
		_ = exec.Command("ip", "netns", "del", sw).Run()
	})
	if out, err := exec.Command("ip", "netns", "add", sw).CombinedOutput(); err != nil {
		t.Skipf("cannot make a network namespace: %v: %s", err, out)
	}
	l.run("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
	l.run("ip", "-n", sw, "link", "set", "br0", "up")
	for i := 1; i <= n; i++ {
		h := &nsHost{lab: l, name: fmt.Sprintf("%sh%d", l.prefix, i), ip: fmt.Sprintf("198.18.%d.%d", sub, i)}
		l.hosts = append(l.hosts, h)
		veth, peer := fmt.Sprintf("%sv%d", l.prefix, i), fmt.Sprintf("%sp%d", l.prefix, i)
		l.run("ip", "netns", "add", h.name)
		l.run("ip", "link", "add", veth, "type", "veth", "peer", "name", peer)
		l.run("ip", "link", "set", veth, "netns", h.name)
		l.run("ip", "link", "set", peer, "netns", sw)
		l.run("ip", "-n", sw, "link", "set", peer, "master", "br0")
		l.run("ip", "-n", sw, "link", "set", peer, "up")
		l.run("ip", "-n", h.name, "addr", "add", h.ip+"/24", "dev", veth)
		l.run("ip", "-n", h.name, "link", "set", veth, "up")
		l.run("ip", "-n", h.name, "link", "set", "lo", "up")
		f, err := os.Open("/run/netns/" + h.name)
		if err != nil {
			t.Fatalf("open namespace %s: %v", h.name, err)
		}
		h.ns = f
	}
	return l
}

func (l *netnsLab) run(args ...string) {
	l.t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		l.t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// refuse makes the kernel refuse every TCP connection between a and b, in
// both directions, and reset the ones they have: each host gets the other's
// address on its loopback, so what it sends there comes back to itself,
// where nothing listens on that address (a reset, ECONNREFUSED), and what
// it receives from there is dropped as coming from itself. This is what a
// firewall that rejects with a TCP reset does; other hosts still reach
// both.
func (l *netnsLab) refuse(a, b *nsHost) {
	l.run("ip", "-n", a.name, "addr", "add", b.ip+"/32", "dev", "lo")
	l.run("ip", "-n", b.name, "addr", "add", a.ip+"/32", "dev", "lo")
}

// heal undoes refuse.
func (l *netnsLab) heal(a, b *nsHost) {
	l.run("ip", "-n", a.name, "addr", "del", b.ip+"/32", "dev", "lo")
	l.run("ip", "-n", b.name, "addr", "del", a.ip+"/32", "dev", "lo")
}

// do runs f in h's network namespace, on an OS thread of its own that ends
// with the call (it is never unlocked, so the runtime discards it).
func (h *nsHost) do(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(int(h.ns.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", h.name, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// dial opens a TCP connection from h: a transport.Config.Dial.
func (h *nsHost) dial(ctx context.Context, addr string) (net.Conn, error) {
	var c net.Conn
	err := h.do(func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, "tcp", addr)
		return err
	})
	return c, err
}
