package netlab

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Mode is how a blocked link fails: what the host whose packets are
// blocked learns, at once or never. The kernel decides every one of them;
// see the package documentation for the table measured on this kernel.
type Mode int

const (
	// Silent: the packets vanish on arrival (an input rule of type
	// blackhole at the receiver). Nobody is told: connection attempts in
	// either direction time out, established connections stall.
	Silent Mode = iota + 1
	// Unreachable: the sender's kernel has a route of type unreachable to
	// the receiver. The sender's connection attempts fail at once with
	// EHOSTUNREACH ("no route to host"); the receiver's attempts in the
	// other direction time out (the sender cannot answer them).
	Unreachable
	// Prohibited: as Unreachable with a route of type prohibit: the
	// sender's attempts fail at once with EACCES ("permission denied").
	Prohibited
	// Refused: the sender's kernel owns the receiver's address (on its
	// loopback), so its connection attempts are refused with a TCP reset,
	// ECONNREFUSED — what a dead process on a live host, or a firewall's
	// REJECT with tcp-reset, gives — and its established connections to
	// the receiver are reset on their next segment. The receiver's
	// packets to the sender are dropped (their source is now the sender's
	// own address): its attempts time out. A process on the sender that
	// listens on a wildcard address (0.0.0.0) would accept the sender's
	// own connections meant for the receiver: lab programs should bind
	// their host's address.
	Refused
)

func (m Mode) String() string {
	switch m {
	case Silent:
		return "silent"
	case Unreachable:
		return "unreachable"
	case Prohibited:
		return "prohibited"
	case Refused:
		return "refused"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode parses a Mode's String form.
func ParseMode(s string) (Mode, error) {
	for _, m := range []Mode{Silent, Unreachable, Prohibited, Refused} {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("%w: mode %q, want silent, unreachable, prohibited or refused", ErrInvalid, s)
}

// Modes lists every Mode.
func Modes() []Mode { return []Mode{Silent, Unreachable, Prohibited, Refused} }

// localRulePref is where each host's lookup of the local routing table
// sits in its rule list; fault rules go before it.
const localRulePref = 1000

// faultRulePref is the priority of Silent's input rules.
const faultRulePref = 100

// blockCmd returns the namespace and the ip command that applies
// (verb "add") or removes ("del") a one-way block of mode from -> to.
func blockCmd(from, to *Host, mode Mode, verb string) (ns, cmd string) {
	switch mode {
	case Silent:
		// One rule per IP protocol rather than one for all: ARP's own
		// route lookup (protocol 0) must not match, or the receiver would
		// stop answering the sender's ARP and the sender's kernel would
		// report EHOSTUNREACH after a few seconds instead of silence.
		var b strings.Builder
		for _, proto := range []string{"tcp", "udp", "icmp"} {
			fmt.Fprintf(&b, "rule %s pref %d from %s/32 iif eth0 ipproto %s blackhole\n", verb, faultRulePref, from.addr, proto)
		}
		return to.ns, strings.TrimSuffix(b.String(), "\n")
	case Unreachable:
		return from.ns, fmt.Sprintf("route %s unreachable %s/32", verb, to.addr)
	case Prohibited:
		return from.ns, fmt.Sprintf("route %s prohibit %s/32", verb, to.addr)
	case Refused:
		return from.ns, fmt.Sprintf("addr %s %s/32 dev lo", verb, to.addr)
	}
	panic("netlab: unknown mode") // unreachable: modes are checked first
}

// checkHost reports a host that is not one of this lab's.
func (l *Lab) checkHost(h *Host) error {
	if h == nil || h.lab != l {
		return fmt.Errorf("%w: host %v is not a host of lab %s", ErrInvalid, h, l.prefix)
	}
	return nil
}

// Block stops packets from one host to another, failing as mode says;
// the other direction is untouched. For TCP a one-way block breaks
// connections both ways (each needs the other's acknowledgements); what it
// decides is who is told and who just waits, and which half of an
// established connection still gets through. Blocking a link that is
// already blocked the same way does nothing; another mode on the same link
// is an error (Heal first).
func (l *Lab) Block(ctx context.Context, from, to *Host, mode Mode) error {
	if err := l.checkBlock(from, to, mode); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	return l.blockLocked(ctx, from, to, mode)
}

func (l *Lab) checkBlock(from, to *Host, mode Mode) error {
	if err := l.checkHost(from); err != nil {
		return err
	}
	if err := l.checkHost(to); err != nil {
		return err
	}
	if from == to {
		return fmt.Errorf("%w: cannot block %s from itself", ErrInvalid, from.name)
	}
	if _, err := ParseMode(mode.String()); err != nil {
		return err
	}
	return nil
}

func (l *Lab) blockLocked(ctx context.Context, from, to *Host, mode Mode) error {
	key := [2]*Host{from, to}
	if cur, ok := l.blocks[key]; ok {
		if cur == mode {
			return nil
		}
		return fmt.Errorf("%w: %s -> %s is already blocked (%v); Heal first", ErrInvalid, from.name, to.name, cur)
	}
	ns, cmd := blockCmd(from, to, mode, "add")
	if err := l.batch(ctx, ns, cmd+"\n"); err != nil {
		return err
	}
	l.blocks[key] = mode
	l.order = append(l.order, key)
	return nil
}

// Partition cuts every link between hosts of different sides, both ways,
// failing as mode says. Hosts in no side keep every link. Each host may be
// in one side only; at least two sides are needed. If it fails half-way,
// the links it had cut are healed again.
func (l *Lab) Partition(ctx context.Context, mode Mode, sides ...[]*Host) error {
	if len(sides) < 2 {
		return fmt.Errorf("%w: a partition needs at least two sides, got %d", ErrInvalid, len(sides))
	}
	seen := map[*Host]int{}
	for i, s := range sides {
		if len(s) == 0 {
			return fmt.Errorf("%w: side %d of the partition is empty", ErrInvalid, i)
		}
		for _, h := range s {
			if err := l.checkHost(h); err != nil {
				return err
			}
			if j, dup := seen[h]; dup {
				return fmt.Errorf("%w: host %s is in sides %d and %d", ErrInvalid, h.name, j, i)
			}
			seen[h] = i
		}
	}
	if _, err := ParseMode(mode.String()); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	var done [][2]*Host
	for i, a := range sides {
		for j, b := range sides {
			if i == j {
				continue
			}
			for _, x := range a {
				for _, y := range b {
					k := [2]*Host{x, y}
					if cur, had := l.blocks[k]; had && cur == mode {
						continue
					}
					if err := l.blockLocked(ctx, x, y, mode); err != nil {
						return errors.Join(err, l.unblockLocked(ctx, done))
					}
					done = append(done, k)
				}
			}
		}
	}
	return nil
}

// Isolate takes the host's switch port down: the host's cable is pulled.
// Its interface loses its carrier; what it sends goes nowhere and nothing
// reaches it, and nobody is told: connection attempts to and from it time
// out, established connections stall (after a few seconds without answers
// to ARP, the kernel of a host that tries to reach it may report
// EHOSTUNREACH, as on a real LAN). It takes one netlink request, no
// process.
func (l *Lab) Isolate(h *Host) error {
	if err := l.checkHost(h); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if l.isolated[h] {
		return nil
	}
	if err := l.links.setUp(h.ifindex, false); err != nil {
		return err
	}
	l.isolated[h] = true
	return nil
}

// Rejoin undoes Isolate for one host (Heal undoes every fault).
func (l *Lab) Rejoin(h *Host) error {
	if err := l.checkHost(h); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if !l.isolated[h] {
		return nil
	}
	if err := l.links.setUp(h.ifindex, true); err != nil {
		return err
	}
	delete(l.isolated, h)
	return nil
}

// Heal undoes every fault: blocks, partitions and isolations. It goes on
// past an error and reports them all.
func (l *Lab) Heal(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	err := l.unblockLocked(ctx, l.order)
	for h := range l.isolated {
		if e := l.links.setUp(h.ifindex, true); e != nil {
			err = errors.Join(err, e)
			continue
		}
		delete(l.isolated, h)
	}
	return err
}

// unblockLocked removes the given blocks, last first.
func (l *Lab) unblockLocked(ctx context.Context, keys [][2]*Host) error {
	var errs []error
	keys = append([][2]*Host(nil), keys...)
	for i := len(keys) - 1; i >= 0; i-- {
		k := keys[i]
		mode, ok := l.blocks[k]
		if !ok {
			continue
		}
		ns, cmd := blockCmd(k[0], k[1], mode, "del")
		if err := l.batch(ctx, ns, cmd+"\n"); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(l.blocks, k)
		for j, o := range l.order {
			if o == k {
				l.order = append(l.order[:j], l.order[j+1:]...)
				break
			}
		}
	}
	return errors.Join(errs...)
}

// Faults describes the faults in force, one line each, in the order
// applied (isolations last): for logs.
func (l *Lab) Faults() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, k := range l.order {
		out = append(out, fmt.Sprintf("%s -> %s blocked (%v)", k[0].name, k[1].name, l.blocks[k]))
	}
	for _, h := range l.hosts {
		if l.isolated[h] {
			out = append(out, h.name+" isolated")
		}
	}
	return out
}
