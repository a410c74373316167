package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// tcpTransport is a raft.NetworkTransport over streamLayer. It has
// NetworkTransport's heartbeat fast path; NewTCP hands it out only through
// MainLoopOnly, which switches that off.
type tcpTransport struct {
	*raft.NetworkTransport
	stream *streamLayer
}

// NewTCP listens on bind and returns a Transport built on
// raft.NetworkTransport, with the heartbeat fast path switched off
// (MainLoopOnly).
//
// advertise is the address peers use to reach this node ("host:port"); it is
// resolved once to check it is usable (an unspecified IP such as 0.0.0.0, a
// multicast IP or port 0 is refused with ErrNotAdvertisable) but a host name
// is kept as given, so peers resolve it themselves. If advertise is empty the
// listener's address is used, which must then have a specific IP.
//
// With cfg.TLS set, every inbound and outbound connection is TLS; see
// MutualTLS. On any error nothing is left listening.
func NewTCP(bind, advertise string, cfg Config) (Transport, error) {
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

	s := &streamLayer{
		ln:        ln,
		advertise: adv,
		timeout:   c.Timeout,
		conns:     make(map[*trackedConn]struct{}),
	}
	if c.TLS != nil {
		s.tls = c.TLS.Clone()
	}
	nt := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  s,
		MaxPool: c.MaxPool,
		Timeout: c.Timeout,
		Logger:  c.Logger,
	})
	return MainLoopOnly(&tcpTransport{NetworkTransport: nt, stream: s}), nil
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
	ta, err := net.ResolveTCPAddr("tcp", advertise)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrNotAdvertisable, advertise, err)
	}
	if err := checkAdvertisable(ta); err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrNotAdvertisable, advertise, err)
	}
	if net.ParseIP(host) != nil {
		return ta, nil // canonical IP text
	}
	return advertiseAddr(net.JoinHostPort(host, port)), nil
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

// streamLayer is the raft.StreamLayer of NewTCP: TCP, optionally TLS. It keeps
// track of every connection it accepted or dialled, so that Close (called by
// NetworkTransport.Close) leaves no connection and no connection goroutine
// behind.
type streamLayer struct {
	ln        net.Listener
	advertise net.Addr
	tls       *tls.Config // nil: plain TCP
	timeout   time.Duration

	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	closed bool
}

var _ raft.StreamLayer = (*streamLayer)(nil)

func (s *streamLayer) Accept() (net.Conn, error) {
	c, err := s.ln.Accept()
	if err != nil {
		return nil, err
	}
	if s.tls != nil {
		c = &serverTLSConn{Conn: tls.Server(c, s.tls), timeout: s.timeout}
	}
	return s.track(c)
}

func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if timeout <= 0 {
		timeout = s.timeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", string(address))
	if err != nil {
		return nil, err
	}
	if s.tls != nil {
		cfg := s.tls
		if cfg.ServerName == "" {
			if host, _, err := net.SplitHostPort(string(address)); err == nil {
				cfg = cfg.Clone()
				cfg.ServerName = host
			}
		}
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("transport: tls handshake with %s: %w", address, err)
		}
		c = tc
	}
	return s.track(c)
}

func (s *streamLayer) track(c net.Conn) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = c.Close()
		return nil, raft.ErrTransportShutdown
	}
	tc := &trackedConn{Conn: c, s: s}
	s.conns[tc] = struct{}{}
	return tc, nil
}

func (s *streamLayer) untrack(c *trackedConn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// Close stops listening and closes every connection still open.
func (s *streamLayer) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	conns := make([]*trackedConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	err := s.ln.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	return err
}

func (s *streamLayer) Addr() net.Addr { return s.advertise }

// open reports how many connections are open.
func (s *streamLayer) open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

type trackedConn struct {
	net.Conn
	s    *streamLayer
	once sync.Once
}

func (c *trackedConn) Close() error {
	var err error
	c.once.Do(func() {
		c.s.untrack(c)
		err = c.Conn.Close()
	})
	return err
}

// serverTLSConn completes the TLS handshake, bounded by timeout, before the
// first read or write, so a peer that connects and never handshakes cannot
// hold a connection goroutine for ever.
type serverTLSConn struct {
	*tls.Conn
	timeout time.Duration
	done    atomic.Bool
}

func (c *serverTLSConn) handshake() error {
	if c.done.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	if err := c.Conn.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("transport: tls handshake with %s: %w", c.RemoteAddr(), err)
	}
	c.done.Store(true)
	return nil
}

func (c *serverTLSConn) Read(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *serverTLSConn) Write(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// Probe implements Prober: it opens a TCP connection to addr and closes it
// at once.
func (t *tcpTransport) Probe(ctx context.Context, addr raft.ServerAddress) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", string(addr))
	if err != nil {
		return err
	}
	return c.Close()
}
