package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// Transport is what termfence needs from a Raft transport: the raft.Transport
// methods, Close (raft.Shutdown closes the transport), and pre-vote support.
//
// Every Transport built by this package ignores SetHeartbeatHandler (see
// MainLoopOnly): heartbeats are delivered on Consumer() and handled on raft's
// main goroutine, which the epoch triple read relies on.
type Transport interface {
	raft.Transport
	raft.WithClose
	raft.WithPreVote
}

// Prober is implemented by transports that can tell whether a peer's
// address refuses connections right now: Probe opens a connection to addr
// the way the transport's own RPCs would (same dialer, same network
// namespace, same source address) and closes it at once, without a TLS
// handshake or an RPC. It returns nil if the connection was accepted, an
// error wrapping syscall.ECONNREFUSED if it was refused (nothing listens
// there, or a firewall rejects it), ErrCannotProbe if this transport cannot
// probe addr (an in-memory address), or another error (a timeout: ctx ended).
//
// package election uses it to tell a dead leader process from a silent one.
// Every Transport of this package implements Prober, and so does
// MainLoopOnly's wrapper, which asks the transport it wraps.
type Prober interface {
	Probe(ctx context.Context, addr raft.ServerAddress) error
}

// Compile-time interface checks.
var (
	_ Prober    = mainLoopOnly{}
	_ Prober    = (*Faulty)(nil)
	_ Prober    = (*Inmem)(nil)
	_ Transport = mainLoopOnly{}
	_ Transport = (*TCP)(nil)
	_ Transport = (*Inmem)(nil)
	_ Transport = (*Faulty)(nil)
)

// Defaults applied (to a copy, never to the caller's Config) for zero fields.
const (
	// DefaultMaxPool is the number of idle outbound connections kept per peer
	// when Config.MaxPool is 0 (hashicorp/raft's usual value).
	DefaultMaxPool = 3
	// DefaultTimeout is the I/O deadline of one RPC (and of an outbound TLS
	// handshake) when Config.Timeout is 0 (hashicorp/raft's usual value).
	DefaultTimeout = 10 * time.Second
	// DefaultMaxInbound is the cap on concurrent inbound connections when
	// Config.MaxInbound is 0. A peer holds a few connections to each other
	// node (up to MaxPool pooled ones, a pipeline, a snapshot); 128 serves
	// clusters of any sane size.
	DefaultMaxInbound = 128
	// DefaultHandshakeTimeout bounds an inbound connection's TLS handshake
	// (or, in plain TCP, the wait for its first byte) when
	// Config.HandshakeTimeout is 0.
	DefaultHandshakeTimeout = 5 * time.Second
	// DefaultIdleTimeout closes an inbound connection on which nothing
	// arrived for this long when Config.IdleTimeout is 0. A peer's
	// heartbeat connection carries a request every HeartbeatTimeout/10;
	// connections that sit in a peer's pool are closed, and that peer's
	// transport replaces them before their next use.
	DefaultIdleTimeout = time.Minute
	// DefaultMaxRPCSize caps one inbound request's bytes (without an
	// InstallSnapshot's data, which is streamed, never decoded) when
	// Config.MaxRPCSize is 0: 8 MiB, room for hashicorp/raft's default
	// batch of 64 entries (MaxAppendEntries) of 128 KiB each.
	DefaultMaxRPCSize = 8 << 20
	// DefaultMaxRPCPayload caps one string or byte slice in an inbound
	// request (a log entry's Data, a snapshot's Configuration) when
	// Config.MaxRPCPayload is 0: 1 MiB. raft's msgpack decoder grows a
	// byte slice 256 KiB at a time, copying, so decoding one payload of n
	// bytes allocates about n*n/512 KiB (measured: 1 MiB 2.8x, 4 MiB 8.6x,
	// 8 MiB 16.5x its size).
	DefaultMaxRPCPayload = 1 << 20
	// DefaultMaxRPCEntries caps the elements of any msgpack array or map in
	// an inbound request — so the log entries of one AppendEntries — when
	// Config.MaxRPCEntries is 0: 1024, hashicorp/raft's upper bound on
	// MaxAppendEntries.
	DefaultMaxRPCEntries = 1024
)

var (
	// ErrInvalidConfig is returned by Config.Validate and NewTCP for a Config
	// with a negative field or an unusable TLS configuration.
	ErrInvalidConfig = errors.New("transport: invalid config")

	// ErrListen is returned by NewTCP when the bind address cannot be listened
	// on (in use, not local, malformed). The network error is wrapped too, so
	// errors.Is(err, syscall.EADDRINUSE) also works.
	ErrListen = errors.New("transport: cannot listen")

	// ErrNotAdvertisable is returned by NewTCP when the advertise address (or,
	// if none is given, the bound address) cannot be given to peers: it does
	// not resolve, has an unspecified IP such as 0.0.0.0 or ::, a multicast IP,
	// or port 0.
	ErrNotAdvertisable = errors.New("transport: address not advertisable")

	// ErrCertificate is returned by MutualTLS when a certificate, key or CA
	// file cannot be read or parsed, or the key does not match the certificate.
	ErrCertificate = errors.New("transport: bad certificate material")

	// ErrPartitioned is returned by a Faulty transport for an RPC to or from a
	// peer that is cut off by Isolate or Cut. Outbound RPCs fail with it at
	// once, without touching the network.
	ErrPartitioned = errors.New("transport: partitioned")

	// ErrDropped is returned by a Faulty transport for an outbound RPC that
	// Drop chose to lose.
	ErrDropped = errors.New("transport: rpc dropped")

	// ErrCannotProbe is returned by Prober.Probe when the transport cannot
	// probe the address (an in-memory transport has no connections to
	// refuse).
	ErrCannotProbe = errors.New("transport: cannot probe this address")

	// ErrClosed is returned by a Faulty transport for an RPC attempted after
	// Close, or interrupted (during an injected delay) by Close.
	ErrClosed = errors.New("transport: closed")
)

// Config configures NewTCP. It is passed by value; NewTCP never modifies it.
type Config struct {
	// MaxPool is the number of idle outbound connections kept open per peer.
	// Zero means DefaultMaxPool (3). Negative is invalid.
	MaxPool int

	// Timeout is the I/O deadline applied to each RPC and to each TLS
	// handshake (InstallSnapshot scales it with the snapshot size, as
	// hashicorp/raft does). Zero means DefaultTimeout (10s). Negative is
	// invalid.
	Timeout time.Duration

	// TLS, when non-nil, makes the transport speak mutual TLS both when
	// listening and when dialling, with this configuration (cloned; the
	// caller's value is not modified). Build it with MutualTLS. Whatever
	// the configuration, the transport itself verifies every peer's
	// certificate after the handshake, in both directions, against the CA
	// in ClientCAs (accepting) and RootCAs (dialling), for both the
	// server-auth and the client-auth usage, and reads the server ID it
	// names (ServerIDURIPrefix): an inbound RPC may claim only that ID, and
	// a dialled peer must be the server raft meant to reach. The
	// configuration's own certificates must name a server ID too. If
	// ServerName is empty the dialled host is used as ServerName, so a
	// configuration with standard hostname verification also checks the
	// peers' DNS names or IP addresses. Nil means plain TCP: no
	// authentication and no encryption.
	TLS *tls.Config

	// Logger receives the transport's logs, raft's NetworkTransport's
	// included (adapted from hclog, with its Info demoted to Debug). Nil
	// means slog.Default().
	Logger *slog.Logger

	// MaxInbound caps the inbound connections open at once. When a new one
	// arrives at the cap, the least useful open one is closed: one still in
	// its handshake before an established one, then the one idle longest.
	// So a flood of idle or half-open connections cannot lock peers out.
	// Zero means DefaultMaxInbound (128). Negative is invalid.
	MaxInbound int

	// HandshakeTimeout bounds how long an inbound connection may take to
	// complete its TLS handshake (with TLS) or to send the first byte of
	// its first RPC (plain TCP) before it is closed. Zero means
	// DefaultHandshakeTimeout (5 s). Negative is invalid.
	HandshakeTimeout time.Duration

	// IdleTimeout closes an inbound connection on which no byte arrived for
	// this long. Zero means DefaultIdleTimeout (1 min). Negative is
	// invalid.
	IdleTimeout time.Duration

	// MaxRPCSize caps the bytes of one inbound request (the RPC type and
	// its msgpack body; an InstallSnapshot's data streams to raft's
	// snapshot store and is not counted). MaxRPCPayload caps each string
	// or byte slice in it (a log entry's Data). MaxRPCEntries caps the elements
	// of every msgpack array and map in it (so the entries of one
	// AppendEntries), and with it the items of the whole request (16 per
	// entry, plus 256). Both are checked on the bytes as they arrive,
	// before raft's decoder sees them: a connection whose request breaks
	// them is closed (InboundStats.FrameRefused). So decoding a request
	// allocates in proportion to its size (docs/DESIGN.md, "Bounded
	// decoding"), whoever sent it — over plain TCP, before any identity.
	// Zero means DefaultMaxRPCSize (8 MiB), DefaultMaxRPCPayload (1 MiB)
	// and DefaultMaxRPCEntries (1024); set them to what the peers'
	// raft.Config can send (its MaxAppendEntries, its largest log entry).
	// Negative is invalid.
	MaxRPCSize    int64
	MaxRPCPayload int64
	MaxRPCEntries int

	// AllowAddrMismatch turns off a check of plain TCP: an inbound RPC
	// whose header claims an address with an IP literal as its host must
	// come from that IP (loopback from any loopback IP), or it is answered
	// with ErrIdentityMismatch (InboundStats.ClaimRefused). Set it where
	// peers' connections come from other addresses than the ones they
	// advertise (NAT, a node with several interfaces whose route to a peer
	// leaves by another). The check makes a forged claim need a forged
	// source address; it is no authentication: plain TCP is for trusted
	// networks (see MutualTLS). Over TLS the certificate binds the ID and
	// the address is not compared.
	AllowAddrMismatch bool

	// Dial, if set, opens every outbound TCP connection (and Probe's): to
	// choose a source address, a network namespace, a proxy. address is
	// host:port. Nil means a net.Dialer.
	Dial func(ctx context.Context, address string) (net.Conn, error)
}

// Validate reports whether c is usable. It returns an error wrapping
// ErrInvalidConfig for a negative count or duration, or a TLS configuration
// without any certificate, without the CA that signs peers (ClientCAs and
// RootCAs), or that does not require and verify client certificates; and
// an error wrapping ErrNoIdentity too if the TLS certificate names no
// usable server identity (see MutualTLS).
func (c Config) Validate() error {
	if c.MaxPool < 0 {
		return fmt.Errorf("%w: MaxPool %d is negative", ErrInvalidConfig, c.MaxPool)
	}
	if c.MaxRPCSize < 0 || c.MaxRPCPayload < 0 || c.MaxRPCEntries < 0 {
		return fmt.Errorf("%w: MaxRPCSize %d, MaxRPCPayload %d or MaxRPCEntries %d is negative", ErrInvalidConfig, c.MaxRPCSize, c.MaxRPCPayload, c.MaxRPCEntries)
	}
	if c.MaxInbound < 0 {
		return fmt.Errorf("%w: MaxInbound %d is negative", ErrInvalidConfig, c.MaxInbound)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Timeout", c.Timeout}, {"HandshakeTimeout", c.HandshakeTimeout}, {"IdleTimeout", c.IdleTimeout}} {
		if d.v < 0 {
			return fmt.Errorf("%w: %s %v is negative", ErrInvalidConfig, d.name, d.v)
		}
	}
	if c.TLS == nil {
		return nil
	}
	if len(c.TLS.Certificates) == 0 && c.TLS.GetCertificate == nil &&
		c.TLS.GetClientCertificate == nil && c.TLS.GetConfigForClient == nil {
		return fmt.Errorf("%w: TLS config has no certificate", ErrInvalidConfig)
	}
	if c.TLS.ClientCAs == nil || c.TLS.RootCAs == nil {
		return fmt.Errorf("%w: TLS config needs the cluster CA as ClientCAs and RootCAs (see MutualTLS)", ErrInvalidConfig)
	}
	if c.TLS.ClientAuth != tls.RequireAndVerifyClientCert {
		return fmt.Errorf("%w: TLS config must require and verify client certificates (ClientAuth tls.RequireAndVerifyClientCert)", ErrInvalidConfig)
	}
	for _, cert := range c.TLS.Certificates {
		leaf := cert.Leaf
		if leaf == nil && len(cert.Certificate) > 0 {
			var err error
			if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
				return fmt.Errorf("%w: TLS certificate: %w", ErrInvalidConfig, err)
			}
		}
		if _, err := ServerIDFromCertificate(leaf); err != nil {
			return fmt.Errorf("%w: TLS certificate: %w", ErrInvalidConfig, err)
		}
	}
	return nil
}

// withDefaults returns a copy of c with zero fields replaced by defaults.
func (c Config) withDefaults() Config {
	if c.MaxPool == 0 {
		c.MaxPool = DefaultMaxPool
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxInbound == 0 {
		c.MaxInbound = DefaultMaxInbound
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxRPCSize == 0 {
		c.MaxRPCSize = DefaultMaxRPCSize
	}
	if c.MaxRPCPayload == 0 {
		c.MaxRPCPayload = DefaultMaxRPCPayload
	}
	if c.MaxRPCEntries == 0 {
		c.MaxRPCEntries = DefaultMaxRPCEntries
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}
