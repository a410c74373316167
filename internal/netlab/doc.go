// Package netlab builds small networks of Linux hosts on one machine, out
// of network namespaces, for tests and measurements whose faults must be
// made by the kernel: a cable pulled, a link that drops, one that refuses,
// one direction cut. Jepsen cuts real links between real machines; netlab
// gives each node of a test a host of its own, on a switch, with its own
// TCP stack, so faults meet real retransmissions, half-open connections,
// SYNs into the void and routes that answer "no".
//
// # The lab
//
// New(ctx, Config{Hosts: []string{"n1", "n2", "n3"}}) makes:
//
//   - a switch: a namespace of its own holding a Linux bridge, br0;
//   - per host, a namespace with a loopback (up) and one interface, eth0,
//     the end of a veth pair whose other end is a port of the bridge;
//     host i gets 198.18.0.(i+1)/24 (Subnet).
//
// Addresses come from 198.18.0.0/15, the range RFC 2544 reserves for
// benchmarking networks, and only from it (IPv6 is disabled in the lab).
// No host has a default route: a host reaches the other hosts of its lab
// and nothing else, and no lab reaches another. Nothing of a lab is in the
// namespace of the process that made it: its interfaces, addresses, routes
// and rules are untouched. A harness in that namespace talks to the hosts
// through one of them (Host.DialContext, Host.Listen) or through pipes to
// the processes it starts in them (Host.Command).
//
// # Running code on a host
//
//   - Host.Command runs a program in the host: `ip netns exec NS program
//     args` (ip replaces itself with the program, so the process is the
//     program's own, and SIGSTOP and SIGKILL reach it). The program dies
//     with the harness (Pdeathsig).
//   - Host.Do runs a Go function on an OS thread that has entered the
//     host's namespace, locked to it, and returns to its own namespace
//     afterwards; sockets it makes stay the host's for their whole life.
//     Host.DialContext and Host.Listen are built on it. Do never ends a
//     thread it could return (an ended thread would SIGKILL the programs
//     Command started from it, by Pdeathsig).
//
// # Faults, and what the kernel makes of them
//
// Measured on this project's machines (Linux 6.18) and pinned by
// TestKernelRouteTypes, TestSilenceOutlastsARP and TestLab. "Refused at
// once" means connect(2) fails within microseconds with the errno named;
// "silent" means it gets no answer at all.
//
//	fault                            sender's connects     other direction     established
//	Isolate(h) (switch port down)    silent¹               silent¹             stall; data late after Rejoin
//	Block(a, b, Silent)              a→b silent            b→a silent          stall; data late after Heal
//	Block(a, b, Unreachable)         a→b EHOSTUNREACH      b→a silent²         a's data late after Heal
//	Block(a, b, Prohibited)          a→b EACCES            b→a silent²         a's data late after Heal
//	Block(a, b, Refused)             a→b ECONNREFUSED      b→a silent²         a's connection reset
//	Partition(mode, sides...)        both ways, per mode, between every pair of sides
//
// ¹ Until ARP gives up (about 3 s from an empty neighbour cache): then a
// dial to an isolated host fails with EHOSTUNREACH, as on a real LAN.
// ² b's SYN arrives but a cannot answer it; after ARP gives up in that
// direction, b may see EHOSTUNREACH.
//
// Why these mechanisms: a route of type blackhole, prohibit or unreachable
// in the sender's own table fails the sender's connect at once, with
// EINVAL, EACCES or EHOSTUNREACH respectively — so a sender-side blackhole
// is not silent. Silence needs the drop at the receiver: an input rule of
// type blackhole (one per IP protocol, so that ARP still works), placed
// before the local table, whose rule the lab moves from priority 0 to 1000.
// Input rules of type prohibit or unreachable answer with ICMP only when the
// host forwards, and then rate-limited by host-wide settings, so they are
// not used. No route gives ECONNREFUSED: only a TCP reset does, so Refused
// puts the receiver's address on the sender's loopback, where the sender's
// own kernel resets its connections (the hosts answer ARP only for the
// addresses of the interface asked, so no other host is misled). There is
// no delay or loss injection: this kernel has no netem qdisc.
//
// # Cleanup
//
// Close kills the processes still in the lab's hosts and removes its
// namespaces, which takes every link, route and rule with them. Namespace
// names carry the maker's PID and start time (tfl-PID-START-SEQ-ROLE), so
// a lab whose maker was killed (SIGKILL, a crash) is recognised as stale
// and removed, with whatever still runs in it, by the next New or by
// Sweep; labs of live processes are never touched. netlabtest.New closes
// a test's lab on failure and panic too, and skips the test where labs
// cannot be built (Check: Linux, CAP_NET_ADMIN and CAP_SYS_ADMIN, and ip
// from iproute2).
//
// # What is not guaranteed
//
//   - Faults change what the kernel does with packets, not timing: there is
//     no latency, jitter, loss rate or bandwidth limit.
//   - A socket made on a host and still open after Close keeps that host's
//     namespace alive, nameless and unreachable, until it is closed; a
//     program started through `ip netns exec` in the instant before Close
//     may escape Close's kill (it still dies with its parent).
//   - Refused makes the sender own the receiver's address: a program on the
//     sender listening on a wildcard address would answer in the
//     receiver's place. Lab programs should bind their host's address.
//   - The lab shares the machine's CPUs, clock and kernel: a loaded machine
//     delays every host alike, and nothing here isolates CPU or memory.
package netlab
