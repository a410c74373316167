package transport

import (
	"context"
	"fmt"
	"net"
	"time"
)

// The plain-TCP source check of a claimed address whose host is a name.
// Over plain TCP an RPC's claimed address must be the address its
// connection comes from (unless Config.AllowAddrMismatch): an IP literal is
// compared at once; a host name is resolved, and the connection's source
// IP must be one of its addresses. A name that does not resolve is refused
// like a mismatch. Otherwise a member that advertises a host name would
// take RPCs claiming it from any source.

// lookupHost resolves a claimed host name (tests replace it).
var lookupHost = func(ctx context.Context, host string) ([]net.IPAddr, error) {
	return net.DefaultResolver.LookupIPAddr(ctx, host)
}

const (
	// hostLookupTimeout bounds one resolution.
	hostLookupTimeout = 2 * time.Second
	// hostCheckTTL is how long a connection keeps the result of checking
	// one claimed address: a claim is resolved at most once in that time
	// per connection, not once per RPC.
	hostCheckTTL = 30 * time.Second
)

// addrMatches compares an RPC's claimed address with the address its
// plain TCP connection comes from. Loopback matches loopback (a node on
// 127.0.0.2 dials from 127.0.0.1). A host name is resolved (lookupHost)
// and must have the source IP among its addresses. A claim that is not
// host:port is not compared here (package election refuses an empty one).
func addrMatches(claimed string, remote net.Addr) error {
	host, _, err := net.SplitHostPort(claimed)
	if err != nil {
		return nil
	}
	ta, ok := remote.(*net.TCPAddr)
	if !ok || ta.IP == nil {
		return nil
	}
	if cip := net.ParseIP(host); cip != nil {
		if ipMatches(cip, ta.IP) {
			return nil
		}
		return fmt.Errorf("%w: rpc claims address %s but comes from %s", ErrIdentityMismatch, claimed, ta.IP)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hostLookupTimeout)
	defer cancel()
	ips, err := lookupHost(ctx, host)
	if err != nil {
		return fmt.Errorf("%w: rpc claims address %s, whose host does not resolve (it comes from %s): %v", ErrIdentityMismatch, claimed, ta.IP, err)
	}
	for _, ip := range ips {
		if ipMatches(ip.IP, ta.IP) {
			return nil
		}
	}
	return fmt.Errorf("%w: rpc claims address %s (%v) but comes from %s", ErrIdentityMismatch, claimed, ips, ta.IP)
}

func ipMatches(claimed, from net.IP) bool {
	return claimed.Equal(from) || claimed.IsLoopback() && from.IsLoopback()
}

// claimCheck is one connection's last checked claim.
type claimCheck struct {
	claim string
	at    time.Time
	err   error
}

// checkClaim is addrMatches for c, remembering the last claim's result
// for hostCheckTTL. Only c's serving goroutine calls it.
func (c *inConn) checkClaim(claimed string) error {
	now := time.Now()
	if k := c.claim; k.claim == claimed && now.Sub(k.at) < hostCheckTTL {
		return k.err
	}
	err := addrMatches(claimed, c.raw.RemoteAddr())
	c.claim = claimCheck{claim: claimed, at: now, err: err}
	return err
}
