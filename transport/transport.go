package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
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
	_ Transport = (*tcpTransport)(nil)
	_ Transport = (*Inmem)(nil)
	_ Transport = (*Faulty)(nil)
)

// Defaults applied (to a copy, never to the caller's Config) for zero fields.
const (
	// DefaultMaxPool is the number of idle outbound connections kept per peer
	// when Config.MaxPool is 0 (hashicorp/raft's usual value).
	DefaultMaxPool = 3
	// DefaultTimeout is the I/O deadline of one RPC (and of a TLS handshake)
	// when Config.Timeout is 0 (hashicorp/raft's usual value).
	DefaultTimeout = 10 * time.Second
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

	// TLS, when non-nil, makes the transport speak TLS both when listening
	// and when dialling, with this configuration (cloned; the caller's value
	// is not modified). It must carry a certificate. Use MutualTLS to build
	// one that requires and verifies a certificate from every peer. If
	// ServerName is empty the dialled host is used as ServerName, so a custom
	// configuration with standard hostname verification works with
	// certificates that carry the peers' DNS names or IP addresses. Nil means
	// plain TCP: no authentication and no encryption.
	TLS *tls.Config

	// Logger receives the transport's logs. Nil means hclog.Default() named
	// "transport".
	Logger hclog.Logger
}

// Validate reports whether c is usable. It returns an error wrapping
// ErrInvalidConfig for a negative MaxPool or Timeout, or a TLS configuration
// without any certificate.
func (c Config) Validate() error {
	if c.MaxPool < 0 {
		return fmt.Errorf("%w: MaxPool %d is negative", ErrInvalidConfig, c.MaxPool)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("%w: Timeout %v is negative", ErrInvalidConfig, c.Timeout)
	}
	if c.TLS != nil && len(c.TLS.Certificates) == 0 && c.TLS.GetCertificate == nil &&
		c.TLS.GetClientCertificate == nil && c.TLS.GetConfigForClient == nil {
		return fmt.Errorf("%w: TLS config has no certificate", ErrInvalidConfig)
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
	if c.Logger == nil {
		c.Logger = hclog.Default().Named("transport")
	}
	return c
}
