package netlab

import (
	"context"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
)

// Host is one machine of a lab: a network namespace with a loopback and
// one interface, eth0, at Addr on the lab's switch. It has no default
// route: it reaches the other hosts of its lab and nothing else.
type Host struct {
	lab     *Lab
	name    string
	ns      string // namespace name
	nsh     *nsHandle
	addr    netip.Addr
	port    string // its port on the switch, in the switch's namespace
	ifindex int    // that port's interface index
}

// Name is the host's name from Config.Hosts.
func (h *Host) Name() string { return h.name }

// Namespace is the name of the host's network namespace, as `ip netns`
// knows it (`ip netns exec NAME ...`).
func (h *Host) Namespace() string { return h.ns }

// Addr is the host's address on the lab's switch.
func (h *Host) Addr() netip.Addr { return h.addr }

// HostPort returns "ADDR:port" for a port on this host.
func (h *Host) HostPort(port int) string {
	return net.JoinHostPort(h.addr.String(), strconv.Itoa(port))
}

func (h *Host) String() string { return h.name + "(" + h.addr.String() + ")" }

// Command returns a command that runs name with args inside the host, as
// `ip netns exec NAMESPACE name args...`. ip enters the namespace and then
// replaces itself with name (it does not fork), so cmd.Process is the
// program itself: signals sent to it (SIGSTOP, SIGKILL) reach the program.
// ip also gives it a private mount namespace with /sys showing the host's
// interfaces. The command gets SIGKILL when the thread that started it
// exits (Pdeathsig), so it does not outlive a harness that is killed:
// start it from an ordinary goroutine, never from inside Do. ctx kills it
// as exec.CommandContext does.
//
// Why ip netns exec rather than entering the namespace in a re-executed
// child: the child needs no code of ours, any program runs the same way,
// the command line can be copied into a shell to reproduce a run, and the
// process this returns is the program's own.
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, h.lab.ip, append([]string{"netns", "exec", h.ns, name}, args...)...)
	cmd.SysProcAttr = labSysProcAttr()
	return cmd
}

// Do runs f inside the host: on an OS thread locked to f for its whole run
// that has entered the host's network namespace, so nothing else runs
// there; afterwards the thread returns to its own namespace and is
// released (discarded if it cannot return). Sockets f makes belong to the
// host for their whole life. Goroutines f starts do not run in the host. A
// panic in f is raised again in the caller.
func (h *Host) Do(f func() error) error { return h.nsh.do(f) }

// DialContext connects from the host to address, as net.Dialer does (an
// http.Transport's DialContext). address should be a literal IP and port:
// a lab host has no resolver.
func (h *Host) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := h.Do(func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	return c, err
}

// Listen listens on the host, as net.ListenConfig.Listen does.
func (h *Host) Listen(ctx context.Context, network, address string) (net.Listener, error) {
	var ln net.Listener
	err := h.Do(func() error {
		var lc net.ListenConfig
		var err error
		ln, err = lc.Listen(ctx, network, address)
		return err
	})
	return ln, err
}
