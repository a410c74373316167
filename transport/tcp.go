package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/internal/raftlog"
)

// TCP is the Transport NewTCP builds: raft's NetworkTransport for every
// outbound RPC, and an inbound server of its own that accepts, limits and
// serves connections and feeds their RPCs to Consumer. Its
// SetHeartbeatHandler does nothing, so raft's heartbeat fast path is off
// (see MainLoopOnly). Stats, Probe and Close are its own besides raft's
// Transport methods.
type TCP struct {
	out      *raft.NetworkTransport
	dial     *dialLayer
	in       *inbound
	localID  string // the server ID the TLS certificate names ("" for plain TCP)
	closeErr error
	once     sync.Once
}

// NewTCP listens on bind and returns a Transport for raft over TCP, with
// the heartbeat fast path switched off: its SetHeartbeatHandler does
// nothing. It returns the concrete *TCP, which is a Transport.
//
// advertise is the address peers use to reach this node ("host:port"): an
// IP, or a host name kept as given so that peers resolve it themselves when
// they dial. An unspecified IP such as 0.0.0.0, a multicast IP, port 0 or a
// malformed name is refused with ErrNotAdvertisable, and so is a name that
// resolves now to such an IP; a name that does not resolve yet is accepted
// (a Kubernetes pod's DNS record appears after the pod starts). If advertise
// is empty the listener's address is used, which must then have a specific
// IP.
//
// Outbound RPCs go through hashicorp/raft's NetworkTransport, so the wire
// format, connection pool and pipelining are raft's. Inbound connections
// are capped (Config.MaxInbound), bounded in their handshake
// (HandshakeTimeout) and idle time (IdleTimeout), and each is served by a
// NetworkTransport of its own, so that its RPCs can be tied to the
// connection they came on. With cfg.TLS set every connection is mutual TLS
// bound to server IDs: see MutualTLS and Config.TLS. On any error nothing
// is left listening.
func NewTCP(bind, advertise string, cfg Config) (*TCP, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()

	var adv net.Addr
	if advertise != "" {
		a, err := resolveAdvertise(advertise)
		if err != nil {
			return nil, err
		}
		adv = a
	} else if host, _, err := net.SplitHostPort(bind); err == nil {
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			return nil, fmt.Errorf("%w: bind address %q has no specific IP and no advertise address was given", ErrNotAdvertisable, bind)
		}
	}

	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrListen, bind, err)
	}
	if adv == nil {
		if err := checkAdvertisable(ln.Addr()); err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("%w: bound address %s: %w", ErrNotAdvertisable, ln.Addr(), err)
		}
		adv = ln.Addr()
	}

	t := &TCP{dial: newDialLayer(adv, c)}
	if c.TLS != nil && len(c.TLS.Certificates) > 0 {
		t.localID, _ = ServerIDFromCertificate(leafOf(c.TLS.Certificates[0])) // checked by Validate
	}
	t.out = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  t.dial,
		MaxPool: c.MaxPool,
		Timeout: c.Timeout,
		Logger:  raftlog.New(c.Logger, "transport"),
	})
	t.in = newInbound(ln, c)
	return t, nil
}

// leafOf returns cert's parsed leaf, or nil.
func leafOf(cert tls.Certificate) *x509.Certificate {
	if cert.Leaf != nil {
		return cert.Leaf
	}
	if len(cert.Certificate) == 0 {
		return nil
	}
	leaf, _ := x509.ParseCertificate(cert.Certificate[0])
	return leaf
}

// LocalServerID returns the server ID that t's TLS certificate names, if t
// is (or wraps, through MainLoopOnly or NewFaulty) a transport from NewTCP
// with TLS; otherwise "". package election refuses a Config whose ID is
// another: every peer would refuse its RPCs.
func LocalServerID(t raft.Transport) string {
	for {
		switch x := t.(type) {
		case mainLoopOnly:
			t = x.Transport
		case *Faulty:
			t = x.inner
		case *TCP:
			return x.localID
		default:
			return ""
		}
	}
}

// Consumer implements raft.Transport: the RPCs of every inbound
// connection.
func (t *TCP) Consumer() <-chan raft.RPC { return t.in.consumer }

// LocalAddr implements raft.Transport: the advertise address.
func (t *TCP) LocalAddr() raft.ServerAddress {
	return raft.ServerAddress(t.dial.advertise.String())
}

// AppendEntriesPipeline always returns raft.ErrPipelineReplicationNotSupported:
// raft then replicates with one AppendEntries at a time. The pipeline of
// raft v1.7.2's NetworkTransport can deadlock when a follower answers
// Success=false (netPipeline's channels are unbuffered at the default
// MaxRPCsInFlight; pipelineSend parks on inprogressCh while decodeResponses
// parks on doneCh): that follower gets no log entry again and Shutdown
// never returns — seen here as an Election.Close hung for six minutes, and
// reported by others running raft in production. An election's log is a
// few configuration changes and barriers, so the pipeline buys nothing.
func (t *TCP) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

// AppendEntries implements raft.Transport.
func (t *TCP) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	return t.out.AppendEntries(id, tagTarget(id, target), args, resp)
}

// RequestVote implements raft.Transport.
func (t *TCP) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	return t.out.RequestVote(id, tagTarget(id, target), args, resp)
}

// RequestPreVote implements raft.WithPreVote.
func (t *TCP) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.out.RequestPreVote(id, tagTarget(id, target), args, resp)
}

// InstallSnapshot implements raft.Transport.
func (t *TCP) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	return t.out.InstallSnapshot(id, tagTarget(id, target), args, resp, data)
}

// TimeoutNow implements raft.Transport.
func (t *TCP) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	return t.out.TimeoutNow(id, tagTarget(id, target), args, resp)
}

// EncodePeer implements raft.Transport: the address as bytes.
func (t *TCP) EncodePeer(_ raft.ServerID, addr raft.ServerAddress) []byte {
	return []byte(addr)
}

// DecodePeer implements raft.Transport.
func (t *TCP) DecodePeer(buf []byte) raft.ServerAddress { return raft.ServerAddress(buf) }

// SetHeartbeatHandler implements raft.Transport and does nothing: inbound
// RPCs, heartbeats included, are delivered on Consumer (NewTCP hands the
// transport out through MainLoopOnly anyway).
func (t *TCP) SetHeartbeatHandler(func(raft.RPC)) {}

// Close stops listening, closes every inbound and outbound connection and
// waits for the transport's own goroutines. Later calls return the first
// call's result.
func (t *TCP) Close() error {
	t.once.Do(func() {
		t.closeErr = errors.Join(t.in.close(), t.out.Close())
	})
	return t.closeErr
}

// Probe implements Prober: it opens a TCP connection to addr with the
// configured dialer and closes it at once.
func (t *TCP) Probe(ctx context.Context, addr raft.ServerAddress) error {
	c, err := dialWith(ctx, t.dial.dial, string(addr))
	if err != nil {
		return err
	}
	return c.Close()
}

// advertiseAddr is an advertise address kept as text (a host name stays a
// host name).
type advertiseAddr string

func (advertiseAddr) Network() string  { return "tcp" }
func (a advertiseAddr) String() string { return string(a) }

func resolveAdvertise(advertise string) (net.Addr, error) {
	host, port, err := net.SplitHostPort(advertise)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrNotAdvertisable, advertise, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
		return nil, fmt.Errorf("%w: %q: port must be 1..65535", ErrNotAdvertisable, advertise)
	}
	if host == "" {
		return nil, fmt.Errorf("%w: %q: no host", ErrNotAdvertisable, advertise)
	}
	if net.ParseIP(host) != nil {
		ta, err := net.ResolveTCPAddr("tcp", advertise)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %w", ErrNotAdvertisable, advertise, err)
		}
		if err := checkAdvertisable(ta); err != nil {
			return nil, fmt.Errorf("%w: %q: %w", ErrNotAdvertisable, advertise, err)
		}
		return ta, nil // canonical IP text
	}
	if err := checkHostName(host); err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrNotAdvertisable, advertise, err)
	}
	// A host name is kept as given and peers resolve it when they dial. A
	// name that does not resolve yet is no error: a Kubernetes pod's
	// headless-Service record is published only after the pod starts, and
	// failing here would make it crash-loop and back off. A name that
	// resolves now must not resolve to an address peers cannot dial.
	if ta, err := net.ResolveTCPAddr("tcp", advertise); err == nil {
		if err := checkAdvertisable(ta); err != nil {
			return nil, fmt.Errorf("%w: %q: %w", ErrNotAdvertisable, advertise, err)
		}
	}
	return advertiseAddr(net.JoinHostPort(host, port)), nil
}

// checkHostName checks that h is a DNS host name: dot-separated labels of
// letters, digits and hyphens, each 1..63 bytes and not starting or ending
// with a hyphen, 253 bytes at most in all (a trailing dot allowed).
func checkHostName(h string) error {
	name := strings.TrimSuffix(h, ".")
	if name == "" || len(name) > 253 {
		return errors.New("not a host name: length")
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("not a host name: label %q", label)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("not a host name: byte %q in label %q", c, label)
			}
		}
	}
	return nil
}

func checkAdvertisable(a net.Addr) error {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return errors.New("not a TCP address")
	}
	switch {
	case ta.IP == nil || ta.IP.IsUnspecified():
		return errors.New("unspecified IP")
	case ta.IP.IsMulticast():
		return errors.New("multicast IP")
	case ta.Port == 0:
		return errors.New("port 0")
	}
	return nil
}
