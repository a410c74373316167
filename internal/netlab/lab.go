package netlab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
)

// Config describes a lab.
type Config struct {
	// Hosts names the hosts, in order: host i (from 0) gets address
	// 198.18.0.(i+1)/24 (see Subnet). Each name is 1-12 characters of
	// [a-z0-9] starting with a letter, unique. Required: 1 to 250 hosts.
	Hosts []string
}

// Validate reports the first problem with c, as an error matching
// ErrInvalid.
func (c Config) Validate() error {
	if len(c.Hosts) == 0 || len(c.Hosts) > maxHosts {
		return fmt.Errorf("%w: %d hosts, want 1 to %d", ErrInvalid, len(c.Hosts), maxHosts)
	}
	seen := make(map[string]bool, len(c.Hosts))
	for _, h := range c.Hosts {
		if !hostNameRE.MatchString(h) {
			return fmt.Errorf("%w: host name %q: want 1-12 of [a-z0-9], starting with a letter", ErrInvalid, h)
		}
		if seen[h] {
			return fmt.Errorf("%w: host name %q twice", ErrInvalid, h)
		}
		seen[h] = true
	}
	return nil
}

// Names returns n host names prefix1, prefix2, ... prefixN: a Config's
// Hosts for n interchangeable hosts.
func Names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i+1)
	}
	return out
}

// Lab is a set of hosts on one Ethernet switch, each host a network
// namespace with one interface, eth0, cabled to a port of a Linux bridge
// that lives in a namespace of its own (the switch). Nothing of it is in
// the namespace New was called from: the host's own interfaces, routes and
// rules are never touched. Methods are safe for concurrent use.
type Lab struct {
	prefix string
	sw     *nsHandle // the switch's namespace
	hosts  []*Host
	byName map[string]*Host
	ip     string // path of iproute2's ip
	links  *linkControl

	mu       sync.Mutex
	closed   bool
	blocks   map[[2]*Host]Mode // applied one-way blocks, by (from, to)
	order    [][2]*Host        // in the order applied, for Heal
	isolated map[*Host]bool
}

var labSeq atomic.Uint64

// New builds a lab: the switch, the hosts, their links, addresses and
// loopbacks, all up. It first removes stale labs of dead processes (Sweep).
// On error nothing of the new lab is left. Close the lab when done; a
// process killed before it could is cleaned up after by the next New or
// Sweep.
func New(ctx context.Context, cfg Config) (*Lab, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := Check(); err != nil {
		return nil, err
	}
	ip, _ := ipPath()
	if _, err := Sweep(ctx); err != nil {
		return nil, err
	}
	pid := os.Getpid()
	start, err := procStart(pid)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	l := &Lab{
		prefix: labPrefix(pid, start, labSeq.Add(1)), ip: ip,
		byName: make(map[string]*Host), blocks: make(map[[2]*Host]Mode), isolated: make(map[*Host]bool),
	}
	if err := l.build(ctx, cfg); err != nil {
		_ = l.Close()
		return nil, err
	}
	return l, nil
}

func (l *Lab) build(ctx context.Context, cfg Config) error {
	swName := l.prefix + "-sw"
	var add strings.Builder
	fmt.Fprintf(&add, "netns add %s\n", swName)
	for i, name := range cfg.Hosts {
		h := &Host{lab: l, name: name, addr: hostAddr(i), port: fmt.Sprintf("p%d", i+1), ns: l.prefix + "-h-" + name}
		l.hosts = append(l.hosts, h)
		l.byName[name] = h
		fmt.Fprintf(&add, "netns add %s\n", h.ns)
	}
	if err := l.batch(ctx, "", add.String()); err != nil {
		if strings.Contains(err.Error(), "ermission") || strings.Contains(err.Error(), "not permitted") {
			return fmt.Errorf("%w: %v", ErrUnsupported, err)
		}
		return err
	}
	var err error
	if l.sw, err = openNS(swName); err != nil {
		return err
	}
	for _, h := range l.hosts {
		if h.nsh, err = openNS(h.ns); err != nil {
			return err
		}
	}
	// Before any interface exists: no IPv6 (the lab is 198.18.0.0/24
	// only), and ARP that answers only for addresses of the interface asked
	// (a refused link puts a peer's address on lo, see Refused).
	for _, n := range append([]*nsHandle{l.sw}, l.nsHandles()...) {
		if err := n.do(setLabSysctls); err != nil {
			return err
		}
	}
	var sw strings.Builder
	sw.WriteString("link set lo up\nlink add br0 type bridge\nlink set br0 up\n")
	for _, h := range l.hosts {
		fmt.Fprintf(&sw, "link add %s type veth peer name eth0 netns %s\n", h.port, h.ns)
		fmt.Fprintf(&sw, "link set %s master br0\nlink set %s up\n", h.port, h.port)
	}
	if err := l.batch(ctx, swName, sw.String()); err != nil {
		return err
	}
	for _, h := range l.hosts {
		// The local table's rule moves behind the fault rules (Silent is
		// an input rule, which the local table would otherwise answer
		// first).
		cmds := fmt.Sprintf("addr add %s/%d dev eth0\nlink set eth0 up\nlink set lo up\n"+
			"rule add pref %d lookup local\nrule del pref 0\n", h.addr, Subnet.Bits(), localRulePref)
		if err := l.batch(ctx, h.ns, cmds); err != nil {
			return err
		}
	}
	if l.links, err = newLinkControl(l.sw); err != nil {
		return err
	}
	for _, h := range l.hosts {
		if h.ifindex, err = l.links.index(h.port); err != nil {
			return err
		}
	}
	return nil
}

func (l *Lab) nsHandles() []*nsHandle {
	var out []*nsHandle
	for _, h := range l.hosts {
		out = append(out, h.nsh)
	}
	return out
}

// Name is the prefix of every namespace of the lab (tfl-PID-START-SEQ).
func (l *Lab) Name() string { return l.prefix }

// Hosts returns the hosts in the order of Config.Hosts.
func (l *Lab) Hosts() []*Host { return append([]*Host(nil), l.hosts...) }

// Host returns the host called name, or nil.
func (l *Lab) Host(name string) *Host { return l.byName[name] }

// Namespaces returns the names of the lab's namespaces (the switch first),
// as `ip netns list` shows them.
func (l *Lab) Namespaces() []string {
	out := []string{l.prefix + "-sw"}
	for _, h := range l.hosts {
		out = append(out, h.ns)
	}
	return out
}

// Close kills every process still running in the lab's hosts and removes
// the lab's namespaces, and with them its links, addresses, routes and
// rules. It is safe to call more than once. A socket a Host made (Do,
// Listen, DialContext) and that is still open keeps its namespace alive,
// nameless and unreachable, until it is closed.
func (l *Lab) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	var errs []error
	if l.links != nil {
		errs = append(errs, l.links.close())
	}
	names := l.Namespaces()
	for _, n := range names {
		errs = append(errs, killNS(n))
	}
	if l.sw != nil {
		errs = append(errs, l.sw.close())
	}
	for _, h := range l.hosts {
		if h.nsh != nil {
			errs = append(errs, h.nsh.close())
		}
	}
	errs = append(errs, removeNS(context.Background(), l.ip, names))
	return errors.Join(errs...)
}

// batch runs `ip [-n ns] -batch -` with cmds on its standard input; the
// first failing line stops it.
func (l *Lab) batch(ctx context.Context, ns, cmds string) error {
	return ipBatch(ctx, l.ip, ns, cmds)
}

func ipBatch(ctx context.Context, ip, ns, cmds string) error {
	var args []string
	if ns != "" {
		args = append(args, "-n", ns)
	}
	args = append(args, "-batch", "-")
	cmd := exec.CommandContext(ctx, ip, args...)
	cmd.Stdin = strings.NewReader(cmds)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		where := "ip"
		if ns != "" {
			where = "ip -n " + ns
		}
		return fmt.Errorf("netlab: %s -batch: %v: %s (commands: %s)", where, err, strings.TrimSpace(out.String()),
			strings.ReplaceAll(strings.TrimSpace(cmds), "\n", "; "))
	}
	return nil
}

// removeNS deletes the named namespaces (those already gone are skipped).
func removeNS(ctx context.Context, ip string, names []string) error {
	var del strings.Builder
	for _, n := range names {
		if _, err := os.Stat(nsDir + "/" + n); err == nil {
			fmt.Fprintf(&del, "netns del %s\n", n)
		}
	}
	if del.Len() == 0 {
		return nil
	}
	return ipBatch(ctx, ip, "", del.String())
}
