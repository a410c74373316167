//go:build linux

package netlab

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// nsDir is where `ip netns` keeps its named namespaces.
const nsDir = "/run/netns"

// nsHandle is an open named network namespace.
type nsHandle struct {
	name string
	mu   sync.RWMutex
	f    *os.File // nil once closed
}

func openNS(name string) (*nsHandle, error) {
	f, err := os.Open(nsDir + "/" + name)
	if err != nil {
		return nil, fmt.Errorf("netlab: open namespace: %w", err)
	}
	return &nsHandle{name: name, f: f}, nil
}

func (n *nsHandle) close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.f == nil {
		return nil
	}
	err := n.f.Close()
	n.f = nil
	return err
}

// panicError carries a panic of f out of do's goroutine.
type panicError struct{ v any }

func (p panicError) Error() string { return fmt.Sprintf("netlab: panic in namespace: %v", p.v) }

// do runs f on an OS thread of its own that has entered the namespace,
// locked to it for f's whole run, so that no other goroutine runs in the
// namespace. Afterwards the thread goes back to the namespace it came from
// and is released; only if it cannot go back is it discarded (kept locked
// until its goroutine ends, which ends the thread). It must not be
// discarded otherwise: Go locks a new goroutine to whatever thread runs
// it, often one that has just started a program, and a program started
// with Pdeathsig (Host.Command) gets SIGKILL when the thread that started
// it ends. Sockets f makes stay in the namespace after f returns. A panic
// in f is re-raised in the caller.
func (n *nsHandle) do(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- n.doLocked(f)
	}()
	err := <-errc
	var p panicError
	if errors.As(err, &p) {
		panic(p.v)
	}
	return err
}

// doLocked is do's body, on the locked thread; it unlocks the thread
// unless the thread stays in the namespace.
func (n *nsHandle) doLocked(f func() error) error {
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread() // still in its own namespace
		return fmt.Errorf("netlab: open this thread's namespace: %w", err)
	}
	defer unix.Close(orig)
	n.mu.RLock()
	if n.f == nil {
		n.mu.RUnlock()
		runtime.UnlockOSThread()
		return ErrClosed
	}
	err = unix.Setns(int(n.f.Fd()), unix.CLONE_NEWNET)
	n.mu.RUnlock()
	if err != nil {
		runtime.UnlockOSThread() // setns failed: still in its own namespace
		return fmt.Errorf("netlab: setns %s: %w", n.name, err)
	}
	ferr := runRecover(f)
	if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
		runtime.UnlockOSThread()
	}
	// Else the thread stays locked and ends with this goroutine.
	return ferr
}

// runRecover runs f and returns a panic in it as a panicError.
func runRecover(f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = panicError{v}
		}
	}()
	return f()
}

// setLabSysctls runs in a new namespace before it has interfaces.
func setLabSysctls() error {
	for _, kv := range [][2]string{
		{"net/ipv6/conf/all/disable_ipv6", "1"},
		{"net/ipv6/conf/default/disable_ipv6", "1"},
		{"net/ipv4/conf/all/arp_ignore", "1"},
		{"net/ipv4/conf/default/arp_ignore", "1"},
		{"net/ipv4/conf/all/arp_announce", "2"},
		{"net/ipv4/conf/default/arp_announce", "2"},
	} {
		err := os.WriteFile("/proc/sys/"+kv[0], []byte(kv[1]), 0)
		if err != nil && !(errors.Is(err, os.ErrNotExist) && strings.Contains(kv[0], "ipv6")) {
			return fmt.Errorf("netlab: sysctl %s: %w", kv[0], err)
		}
	}
	return nil
}

// procStart returns the start time of process pid, in clock ticks after
// boot (/proc/PID/stat field 22).
func procStart(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("netlab: /proc/%d/stat: no command", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); field 22 is f[19].
	if len(f) < 20 {
		return 0, fmt.Errorf("netlab: /proc/%d/stat: %d fields", pid, len(f))
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// Check reports whether this machine can build labs: it needs Linux,
// CAP_NET_ADMIN and CAP_SYS_ADMIN (root has both), and `ip` from iproute2.
// The error matches ErrUnsupported and says what is missing.
func Check() error {
	if _, err := ipPath(); err != nil {
		return fmt.Errorf("%w: no ip command (install iproute2)", ErrUnsupported)
	}
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		hex, ok := strings.CutPrefix(line, "CapEff:")
		if !ok {
			continue
		}
		caps, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
		if err != nil {
			return fmt.Errorf("%w: CapEff %q: %v", ErrUnsupported, hex, err)
		}
		var missing []string
		if caps&(1<<unix.CAP_NET_ADMIN) == 0 {
			missing = append(missing, "CAP_NET_ADMIN")
		}
		if caps&(1<<unix.CAP_SYS_ADMIN) == 0 {
			missing = append(missing, "CAP_SYS_ADMIN")
		}
		if len(missing) > 0 {
			return fmt.Errorf("%w: needs %s (run as root)", ErrUnsupported, strings.Join(missing, " and "))
		}
		return nil
	}
	return fmt.Errorf("%w: no CapEff in /proc/self/status", ErrUnsupported)
}

// ipPath finds iproute2's ip, also where a non-root PATH leaves it out.
func ipPath() (string, error) {
	if p, err := exec.LookPath("ip"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"} {
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("netlab: no ip command")
}

// killNS SIGKILLs every process (other than this one) whose network
// namespace is the named one, as `ip netns pids` finds them.
func killNS(name string) error {
	var want unix.Stat_t
	if err := unix.Stat(nsDir+"/"+name, &want); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("netlab: %s: %w", name, err)
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		var st unix.Stat_t
		if unix.Stat("/proc/"+e.Name()+"/ns/net", &st) != nil {
			continue
		}
		if st.Dev == want.Dev && st.Ino == want.Ino {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
	return nil
}

// linkControl sets links of the switch up and down over a netlink socket
// made in the switch's namespace (a socket keeps the namespace it was made
// in), so a fault takes one system call, not an exec of ip.
type linkControl struct {
	mu  sync.Mutex
	fd  int
	seq uint32
	sw  *nsHandle
}

func newLinkControl(sw *nsHandle) (*linkControl, error) {
	lc := &linkControl{fd: -1, sw: sw}
	err := sw.do(func() error {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
		if err != nil {
			return fmt.Errorf("netlab: netlink socket: %w", err)
		}
		if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			unix.Close(fd)
			return fmt.Errorf("netlab: netlink bind: %w", err)
		}
		lc.fd = fd
		return nil
	})
	return lc, err
}

// index returns the interface index of the switch's link called name.
func (lc *linkControl) index(name string) (int, error) {
	var idx int
	err := lc.sw.do(func() error {
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			return fmt.Errorf("netlab: switch port %s: %w", name, err)
		}
		idx = ifi.Index
		return nil
	})
	return idx, err
}

// setUp sets the link with index idx administratively up or down and waits
// for the kernel's acknowledgement.
func (lc *linkControl) setUp(idx int, up bool) error {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.fd < 0 {
		return ErrClosed
	}
	lc.seq++
	// struct nlmsghdr (16 bytes) + struct ifinfomsg (16 bytes)
	msg := make([]byte, unix.NLMSG_HDRLEN+unix.SizeofIfInfomsg)
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint16(msg[4:], unix.RTM_NEWLINK)
	ne.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	ne.PutUint32(msg[8:], lc.seq)
	ifi := msg[unix.NLMSG_HDRLEN:]
	ifi[0] = unix.AF_UNSPEC
	ne.PutUint32(ifi[4:], uint32(int32(idx)))
	var flags uint32
	if up {
		flags = unix.IFF_UP
	}
	ne.PutUint32(ifi[8:], flags)
	ne.PutUint32(ifi[12:], unix.IFF_UP) // ifi_change: only IFF_UP
	if err := unix.Sendto(lc.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlab: netlink send: %w", err)
	}
	buf := make([]byte, 8192)
	for {
		n, _, err := unix.Recvfrom(lc.fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return fmt.Errorf("netlab: netlink receive: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return fmt.Errorf("netlab: netlink: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != lc.seq || m.Header.Type != unix.NLMSG_ERROR {
				continue
			}
			if len(m.Data) < 4 {
				return errors.New("netlab: netlink: short acknowledgement")
			}
			if code := int32(ne.Uint32(m.Data)); code != 0 {
				return fmt.Errorf("netlab: set link %d up=%t: %w", idx, up, syscall.Errno(-code))
			}
			return nil
		}
	}
}

func (lc *linkControl) close() error {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.fd < 0 {
		return nil
	}
	err := unix.Close(lc.fd)
	lc.fd = -1
	return err
}

// labSysProcAttr makes a host's command die with the thread that started
// it (see Host.Command).
func labSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
