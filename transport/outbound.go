package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// The outbound path is raft's own NetworkTransport (connection pool,
// pipelining, wire format) over dialLayer. Two things are added:
//
//   - raft passes each RPC the target's server ID and address, but a
//     StreamLayer's Dial gets only the address. TCP tags the
//     address with the ID (tagTarget) before handing the call to the
//     NetworkTransport, so that Dial knows whom it is meant to reach and,
//     over TLS, refuses a peer whose certificate names another server. The
//     pool is keyed by the tagged address, one pool per (ID, address).
//   - the NetworkTransport reuses a pooled connection without checking it.
//     One that the peer closed while it sat in the pool (the peer's idle
//     timeout, an eviction, a restart) fails the next RPC sent on it: a
//     lost vote is a lost election round. outConn looks at a connection
//     that has been unused for staleAfter before its first write (a
//     non-blocking peek at the socket) and, if the peer has closed it,
//     dials a new one in its place, before any byte of the RPC has been
//     written.

// staleAfter is how long a connection must have been unused before its
// next write checks that the peer has not closed it. The check is one
// non-blocking system call; a heartbeat connection, busy every few
// milliseconds, mostly skips it.
const staleAfter = time.Millisecond

// tagSep separates the server ID from the address in a tagged target. It
// cannot occur in a host:port address.
const tagSep = "\x00"

// tagTarget is the address raft's NetworkTransport is given for an RPC to
// server id at addr.
func tagTarget(id raft.ServerID, addr raft.ServerAddress) raft.ServerAddress {
	return raft.ServerAddress(string(id) + tagSep + string(addr))
}

// untagTarget undoes tagTarget. An untagged address has no ID.
func untagTarget(t raft.ServerAddress) (raft.ServerID, string) {
	if i := strings.LastIndex(string(t), tagSep); i >= 0 {
		return raft.ServerID(t[:i]), string(t[i+len(tagSep):])
	}
	return "", string(t)
}

// dialLayer is the raft.StreamLayer of the outbound NetworkTransport: it
// only dials (Accept blocks until Close), optionally with TLS, and tracks
// every connection so that Close leaves none open.
type dialLayer struct {
	advertise net.Addr
	dial      func(ctx context.Context, address string) (net.Conn, error)
	tls       *tls.Config     // nil: plain TCP
	roots     *x509.CertPool  // verifies peers when tls is set
	timeout   time.Duration   // dial and handshake bound when raft gives none
	ctx       context.Context // cancelled by Close: in-flight dials end
	cancel    context.CancelFunc

	mu      sync.Mutex
	conns   map[*outConn]struct{}
	closed  bool
	redials atomic.Uint64 // stale connections replaced
}

var _ raft.StreamLayer = (*dialLayer)(nil)

func newDialLayer(advertise net.Addr, c Config) *dialLayer {
	ctx, cancel := context.WithCancel(context.Background())
	d := &dialLayer{advertise: advertise, dial: c.Dial, timeout: c.Timeout, ctx: ctx, cancel: cancel, conns: make(map[*outConn]struct{})}
	if c.TLS != nil {
		d.tls = c.TLS.Clone()
		d.roots = c.TLS.RootCAs
	}
	return d
}

// Accept blocks until Close: inbound connections are the inbound server's.
func (d *dialLayer) Accept() (net.Conn, error) {
	<-d.ctx.Done()
	return nil, raft.ErrTransportShutdown
}

func (d *dialLayer) Addr() net.Addr { return d.advertise }

// Dial connects to the server a tagged target names.
func (d *dialLayer) Dial(target raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	id, addr := untagTarget(target)
	c, err := d.connect(id, addr, timeout)
	if err != nil {
		return nil, err
	}
	oc := &outConn{d: d, id: id, addr: addr, timeout: timeout, conn: c}
	oc.touch()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		_ = c.Close()
		return nil, raft.ErrTransportShutdown
	}
	d.conns[oc] = struct{}{}
	return oc, nil
}

// connect dials addr and, with TLS, completes the handshake and checks that
// the peer is server id.
func (d *dialLayer) connect(id raft.ServerID, addr string, timeout time.Duration) (net.Conn, error) {
	if timeout <= 0 {
		timeout = d.timeout
	}
	ctx, cancel := context.WithTimeout(d.ctx, timeout)
	defer cancel()
	c, err := dialWith(ctx, d.dial, addr)
	if err != nil {
		return nil, err
	}
	if d.tls == nil {
		return c, nil
	}
	cfg := d.tls
	if cfg.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg = cfg.Clone()
			cfg.ServerName = host
		}
	}
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("transport: tls handshake with %s (%s): %w", id, addr, err)
	}
	peer, err := verifyPeer(tc.ConnectionState(), d.roots)
	if err == nil && id != "" && peer != string(id) {
		err = fmt.Errorf("%w: dialled %s at %s, its certificate names %s", ErrIdentityMismatch, id, addr, peer)
	}
	if err == nil && id == "" {
		err = fmt.Errorf("%w: dialled %s with no server ID to check the certificate against", ErrIdentityMismatch, addr)
	}
	if err != nil {
		_ = tc.Close()
		return nil, err
	}
	return tc, nil
}

// dialWith opens a TCP connection to addr with dial, or a net.Dialer.
func dialWith(ctx context.Context, dial func(context.Context, string) (net.Conn, error), addr string) (net.Conn, error) {
	if dial != nil {
		return dial(ctx, addr)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, "tcp", addr)
}

func (d *dialLayer) untrack(c *outConn) {
	d.mu.Lock()
	delete(d.conns, c)
	d.mu.Unlock()
}

// Close cancels dials in progress and closes every connection.
func (d *dialLayer) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.cancel()
	conns := make([]*outConn, 0, len(d.conns))
	for c := range d.conns {
		conns = append(conns, c)
	}
	d.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	return nil
}

// outConn is an outbound connection that replaces itself with a fresh one
// when the peer closed it while it was unused (see staleAfter).
type outConn struct {
	d       *dialLayer
	id      raft.ServerID
	addr    string
	timeout time.Duration

	mu      sync.Mutex // guards conn, pending and the deadlines
	conn    net.Conn
	pending []byte    // bytes the liveness check read (none expected)
	readDL  time.Time // deadlines raft set, re-applied to a replacement
	writeDL time.Time
	last    atomic.Int64 // unix nanos of the last read or write
	reading atomic.Int32 // reads in progress
	closed  bool
}

func (c *outConn) touch() { c.last.Store(time.Now().UnixNano()) }

func (c *outConn) current() net.Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn
}

func (c *outConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	if len(c.pending) > 0 {
		n := copy(b, c.pending)
		c.pending = c.pending[n:]
		c.mu.Unlock()
		return n, nil
	}
	conn := c.conn
	c.reading.Add(1)
	c.mu.Unlock()
	n, err := conn.Read(b)
	c.reading.Add(-1)
	c.touch()
	return n, err
}

func (c *outConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	if !c.closed && c.reading.Load() == 0 && time.Since(time.Unix(0, c.last.Load())) >= staleAfter && c.deadLocked() {
		if nc, err := c.d.connect(c.id, c.addr, c.timeout); err == nil {
			_ = c.conn.Close()
			c.conn = nc
			c.pending = nil
			_ = nc.SetReadDeadline(c.readDL)
			_ = nc.SetWriteDeadline(c.writeDL)
			c.d.redials.Add(1)
		}
	}
	conn := c.conn
	c.mu.Unlock()
	n, err := conn.Write(b)
	c.touch()
	return n, err
}

// deadLocked reports whether the peer has closed the connection (or left
// bytes on it that nobody asked for), without waiting: the socket is peeked
// at. A TLS connection with bytes pending (a close_notify alert, or a late
// session ticket) is read for at most a millisecond to tell which. Called
// with mu held and no read in progress.
func (c *outConn) deadLocked() bool {
	raw := c.conn
	tc, isTLS := c.conn.(*tls.Conn)
	if isTLS {
		raw = tc.NetConn()
	}
	switch peekConn(raw) {
	case peekEmpty:
		return false
	case peekClosed:
		return true
	case peekData:
		if !isTLS {
			return true // bytes no request asked for: the connection is out of step
		}
	}
	if err := c.conn.SetReadDeadline(time.Now().Add(time.Millisecond)); err != nil {
		return true
	}
	var one [1]byte
	n, err := c.conn.Read(one[:])
	_ = c.conn.SetReadDeadline(c.readDL)
	if n > 0 {
		return true // out of step
	}
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// What peekConn found on a socket.
const (
	peekUnknown = iota // cannot tell (not a socket, or no peeking here)
	peekEmpty          // nothing to read: open
	peekClosed         // end of file or an error: the peer closed it
	peekData           // bytes are waiting
)

func (c *outConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readDL, c.writeDL = t, t
	return c.conn.SetDeadline(t)
}

func (c *outConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readDL = t
	return c.conn.SetReadDeadline(t)
}

func (c *outConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writeDL = t
	return c.conn.SetWriteDeadline(t)
}

func (c *outConn) LocalAddr() net.Addr  { return c.current().LocalAddr() }
func (c *outConn) RemoteAddr() net.Addr { return c.current().RemoteAddr() }

func (c *outConn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	conn := c.conn
	c.mu.Unlock()
	c.d.untrack(c)
	return conn.Close()
}
