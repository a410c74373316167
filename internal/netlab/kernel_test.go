//go:build linux

package netlab_test

import (
	"sync"
	"time"

	"fmt"
	"github.com/termfence/termfence/internal/netlab"
	"strings"
	"testing"

	"github.com/termfence/termfence/internal/netlab/netlabtest"
)

// TestKernelRouteTypes pins the kernel facts the package documentation
// states and the modes rest on, with plain ip commands and no netlab
// fault: a route of type blackhole, prohibit or unreachable in the
// sender's own table fails its connection attempts at once (EINVAL,
// EACCES, EHOSTUNREACH: so a sender-side blackhole is not silent), while
// attempts in the other direction go unanswered; an input rule of type
// blackhole at the receiver (behind which the lab puts the local table)
// is silent both ways; input rules of type prohibit or unreachable are
// silent too (the kernel sends their ICMP errors only when it forwards,
// and then rate-limited). If a kernel changes any of this, this test
// says which line of the documentation is wrong.
func TestKernelRouteTypes(t *testing.T) {
	t.Parallel()
	lab := netlabtest.New(t, "a", "b")
	a, b := lab.Host("a"), lab.Host("b")
	for _, h := range lab.Hosts() {
		serve(t, h)
	}
	names := []string{"a", "b"}
	hosts := lab.Hosts()
	for _, tc := range []struct {
		ns, add, del string
		want         [][]string
	}{
		{a.Namespace(), "route add blackhole %s/32", "route del blackhole %s/32", with(2, names, "a>b=EINVAL", "b>a=timeout")},
		{a.Namespace(), "route add prohibit %s/32", "route del prohibit %s/32", with(2, names, "a>b=EACCES", "b>a=timeout")},
		{a.Namespace(), "route add unreachable %s/32", "route del unreachable %s/32", with(2, names, "a>b=EHOSTUNREACH", "b>a=timeout")},
		{b.Namespace(), "rule add pref 100 from %s/32 iif eth0 blackhole", "rule del pref 100 from %s/32 iif eth0 blackhole", with(2, names, "a>b=timeout", "b>a=timeout")},
		{b.Namespace(), "rule add pref 100 from %s/32 iif eth0 prohibit", "rule del pref 100 from %s/32 iif eth0 prohibit", with(2, names, "a>b=timeout", "b>a=timeout")},
		{b.Namespace(), "rule add pref 100 from %s/32 iif eth0 unreachable", "rule del pref 100 from %s/32 iif eth0 unreachable", with(2, names, "a>b=timeout", "b>a=timeout")},
	} {
		target := b.Addr().String()
		if tc.ns == b.Namespace() {
			target = a.Addr().String()
		}
		add := fmt.Sprintf(tc.add, target)
		ipOut(t, append([]string{"-n", tc.ns}, strings.Fields(add)...)...)
		checkMatrix(t, add, hosts, tc.want)
		ipOut(t, append([]string{"-n", tc.ns}, strings.Fields(fmt.Sprintf(tc.del, target))...)...)
		checkMatrix(t, add+", removed", hosts, allOK(2))
	}
}

// TestSilenceOutlastsARP: a Silent block stays silent past the time the
// kernel gives ARP (about three seconds from an empty cache), because its
// rules leave ARP alone, while a dial to an isolated host — a host gone
// from the LAN — ends in EHOSTUNREACH once ARP has given up, as the package
// documentation says.
func TestSilenceOutlastsARP(t *testing.T) {
	t.Parallel()
	lab := netlabtest.New(t, netlab.Names("h", 3)...)
	h1, h2, h3 := lab.Host("h1"), lab.Host("h2"), lab.Host("h3")
	for _, h := range lab.Hosts() {
		serve(t, h)
	}
	ctx := ctxT(t, time.Minute)
	if err := lab.Block(ctx, h1, h2, netlab.Silent); err != nil {
		t.Fatal(err)
	}
	if err := lab.Isolate(h3); err != nil {
		t.Fatal(err)
	}
	flushNeigh(t, lab)
	const wait = 6 * time.Second
	var silent, isolated string
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); silent = dial(h1, h2.HostPort(port), wait) }()
	go func() { defer wg.Done(); isolated = dial(h1, h3.HostPort(port), wait) }()
	wg.Wait()
	if silent != "timeout" {
		t.Errorf("h1 -> h2 under a silent block, %v: %s, want timeout", wait, silent)
	}
	if isolated != "EHOSTUNREACH" {
		t.Errorf("h1 -> isolated h3, %v: %s, want EHOSTUNREACH (ARP gave up)", wait, isolated)
	}
}
