package transport

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/internal/raftlog"
)

// The inbound path. raft's NetworkTransport serves every accepted
// connection on a goroutine of its own, with no cap, no deadline and a
// 256 KiB read buffer, and hands the decoded RPCs to one channel: its
// consumer cannot tell which connection an RPC came from. So:
//
//   - inbound accepts the connections itself, at most MaxInbound at a time
//     (a new one evicts the least useful, see worseThan), gives each
//     HandshakeTimeout to complete its TLS handshake (or, in plain TCP, to
//     send its first byte), and closes one on which nothing arrives for
//     IdleTimeout;
//   - each connection that passes is served by a NetworkTransport of its
//     own (raft's decoding, unchanged), whose RPCs a forwarding goroutine
//     passes on to the transport's Consumer. Over TLS the connection's
//     certificate names a server ID (verifyPeer), and an RPC that claims
//     another ID in its header is answered with ErrIdentityMismatch
//     instead: the identity checks of package election's admission layer
//     then rest on the certificate, not on a claim.
//
// An InstallSnapshot whose data the consumer left unread (a refused one)
// closes its connection instead of being answered: the unread bytes would
// otherwise be decoded as the next RPCs.

// InboundStats counts what a transport from NewTCP did with inbound
// connections since it was created.
type InboundStats struct {
	Open            int    // inbound connections open now
	Accepted        uint64 // connections accepted
	Evicted         uint64 // closed to make room for a new one (MaxInbound)
	HandshakeFailed uint64 // TLS handshake (or, plain, first byte) failed or timed out, or the peer's certificate is no peer's (not counting evicted ones)
	IdleClosed      uint64 // closed after IdleTimeout without a byte
	ClaimRefused    uint64 // RPCs refused for claiming another server ID than the certificate names
	FrameRefused    uint64 // connections closed for a request beyond MaxRPCSize, MaxRPCPayload or MaxRPCEntries (before decoding)
}

// Inbound returns the inbound connection counts of t, which must be (or
// wrap, through MainLoopOnly or NewFaulty) a transport from NewTCP; ok is
// false otherwise.
func Inbound(t raft.Transport) (s InboundStats, ok bool) {
	for {
		switch x := t.(type) {
		case mainLoopOnly:
			t = x.Transport
		case *Faulty:
			t = x.inner
		case *TCP:
			return x.in.stats(), true
		default:
			return InboundStats{}, false
		}
	}
}

// inbound is the accepting half of a TCP transport.
type inbound struct {
	ln       net.Listener
	tls      *tls.Config    // nil: plain TCP
	roots    *x509.CertPool // verifies peers' certificates when tls is set
	max      int
	shake    time.Duration // HandshakeTimeout
	idle     time.Duration // IdleTimeout
	maxSize  int64         // MaxRPCSize
	maxLen   int           // MaxRPCEntries
	maxPay   int64         // MaxRPCPayload
	timeout  time.Duration // write deadline of a response
	log      *slog.Logger
	consumer chan raft.RPC
	quit     chan struct{}
	member   atomic.Pointer[func(id string) (member, known bool)] // SetMembership
	anyAddr  bool                                                 // AllowAddrMismatch

	mu     sync.Mutex
	conns  map[*inConn]struct{}
	closed bool
	wg     sync.WaitGroup

	accepted, evicted, shakeFailed, idleClosed, claimRefused, frameRefused atomic.Uint64
	warned                                                                 atomic.Int64 // unix nanos of the last warning
	quiet                                                                  atomic.Int64 // lines logged at Debug since that warning
}

func newInbound(ln net.Listener, c Config) *inbound {
	s := &inbound{
		ln: ln, max: c.MaxInbound, shake: c.HandshakeTimeout, idle: c.IdleTimeout, timeout: c.Timeout,
		maxSize: c.MaxRPCSize, maxLen: c.MaxRPCEntries, maxPay: c.MaxRPCPayload, anyAddr: c.AllowAddrMismatch,
		log: c.Logger, consumer: make(chan raft.RPC), quit: make(chan struct{}), conns: make(map[*inConn]struct{}),
	}
	if c.TLS != nil {
		s.tls = c.TLS.Clone()
		s.roots = c.TLS.ClientCAs
	}
	s.wg.Add(1)
	go s.accept()
	return s
}

func (s *inbound) stats() InboundStats {
	s.mu.Lock()
	open := len(s.conns)
	s.mu.Unlock()
	return InboundStats{
		Open: open, Accepted: s.accepted.Load(), Evicted: s.evicted.Load(), HandshakeFailed: s.shakeFailed.Load(),
		IdleClosed: s.idleClosed.Load(), ClaimRefused: s.claimRefused.Load(), FrameRefused: s.frameRefused.Load(),
	}
}

// warnEvery is how often the inbound server logs at Warn level: its first
// problem at once, then one line a minute at most, carrying how many were
// logged at Debug since the last (raft's own peer warnings are summarised
// once a minute too).
const warnEvery = time.Minute

// warn logs at Warn level at most once per warnEvery, at Debug otherwise,
// so a flood of bad connections cannot flood the log.
func (s *inbound) warn(msg string, args ...any) {
	now := time.Now().UnixNano()
	last := s.warned.Load()
	if (last == 0 || now-last >= int64(warnEvery)) && s.warned.CompareAndSwap(last, now) {
		s.log.Warn(msg, append(args, "debug-lines-since-last-warning", s.quiet.Swap(0))...)
		return
	}
	s.quiet.Add(1)
	s.log.Debug(msg, args...)
}

func (s *inbound) accept() {
	defer s.wg.Done()
	var delay time.Duration
	for {
		c, err := s.ln.Accept()
		if err != nil {
			select {
			case <-s.quit:
				return
			default:
			}
			// Out of file descriptors, say: back off as raft does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.log.Error("accepting a connection failed", "error", err, "retry-in", delay)
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-s.quit:
				t.Stop()
				return
			}
			continue
		}
		delay = 0
		s.accepted.Add(1)
		ic := &inConn{raw: c, Conn: c, s: s, done: make(chan struct{}), scan: newFrameScanner(s.maxSize, s.maxPay, s.maxLen)}
		ic.touch()
		if !s.add(ic) {
			_ = c.Close()
			return
		}
		s.wg.Add(1)
		go s.serve(ic)
	}
}

// add registers c, first evicting one connection if MaxInbound are open.
func (s *inbound) add(c *inConn) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	var victim *inConn
	if len(s.conns) >= s.max {
		for o := range s.conns {
			if victim == nil || o.worseThan(victim) {
				victim = o
			}
		}
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	if victim != nil {
		s.evicted.Add(1)
		victim.evicted.Store(true)
		s.warn("too many inbound connections: closing one", "max-inbound", s.max,
			"closed", victim.raw.RemoteAddr().String(), "peer", victim.peerID(), "established", victim.established.Load(), "proven", victim.rank() == 2,
			"idle", time.Since(victim.lastRead()))
		_ = victim.Close()
	}
	return true
}

func (s *inbound) remove(c *inConn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// close stops accepting, closes every connection and waits for the
// goroutines of this package (raft's per-connection goroutines end as
// their connections close).
func (s *inbound) close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.quit)
	conns := make([]*inConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	err := s.ln.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	s.wg.Wait()
	return err
}

// serve takes c through its handshake and then forwards its RPCs until it
// closes.
func (s *inbound) serve(c *inConn) {
	defer s.wg.Done()
	defer c.Close()
	if err := s.handshake(c); err != nil {
		if !c.evicted.Load() {
			s.shakeFailed.Add(1)
			if errors.Is(err, io.EOF) {
				// The peer closed it before asking anything: raft
				// dropping a pooled or pipeline connection, not an attack.
				s.log.Debug("inbound connection closed before a request", "remote", c.raw.RemoteAddr().String())
			} else {
				s.warn("inbound connection refused", "remote", c.raw.RemoteAddr().String(), "error", err)
			}
		}
		return
	}
	c.established.Store(true)
	nt := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  &oneConn{c: c, closed: make(chan struct{})},
		Timeout: s.timeout,
		Logger:  raftlog.New(s.log, "transport"),
	})
	defer nt.Close()
	for {
		select {
		case rpc := <-nt.Consumer():
			if !s.deliver(c, rpc) {
				return
			}
		case <-c.done:
			return
		case <-s.quit:
			return
		}
	}
}

// handshake completes c's TLS handshake and verifies the peer's identity,
// or (plain TCP) waits for its first byte, within HandshakeTimeout.
func (s *inbound) handshake(c *inConn) error {
	deadline := time.Now().Add(s.shake)
	if s.tls == nil {
		if err := c.raw.SetReadDeadline(deadline); err != nil {
			return err
		}
		br := bufio.NewReaderSize(c.raw, 16)
		if _, err := br.Peek(1); err != nil {
			return fmt.Errorf("no request within %v: %w", s.shake, err)
		}
		b, _ := br.Peek(br.Buffered())
		c.pending = append([]byte(nil), b...)
		return c.raw.SetReadDeadline(time.Time{})
	}
	tc := tls.Server(c.raw, s.tls)
	if err := tc.SetDeadline(deadline); err != nil {
		return err
	}
	if err := tc.Handshake(); err != nil {
		return fmt.Errorf("tls handshake: %w", err)
	}
	id, err := verifyPeer(tc.ConnectionState(), s.roots)
	if err != nil {
		return err
	}
	if err := tc.SetDeadline(time.Time{}); err != nil {
		return err
	}
	c.mu.Lock()
	c.Conn, c.peer = tc, id
	c.mu.Unlock()
	c.touch()
	return nil
}

// deliver hands rpc to the consumer and its answer back, and reports
// whether the connection may go on. Over TLS an RPC must claim the server
// ID the connection's certificate names.
func (s *inbound) deliver(c *inConn, rpc raft.RPC) bool {
	if c.peer != "" {
		claimed := ""
		if h, ok := rpc.Command.(raft.WithRPCHeader); ok {
			claimed = string(h.GetRPCHeader().ID)
		}
		if claimed != c.peer {
			s.claimRefused.Add(1)
			s.warn("refused an rpc that claims another server than its certificate names",
				"certificate", c.peer, "claimed", claimed, "remote", c.raw.RemoteAddr().String())
			if rpc.Reader != nil {
				return false // its data is unread: close, do not answer
			}
			rpc.Respond(nil, fmt.Errorf("%w: certificate names %s, rpc claims %q", ErrIdentityMismatch, c.peer, claimed))
			return true
		}
	}
	if c.peer == "" && !s.anyAddr {
		if h, ok := rpc.Command.(raft.WithRPCHeader); ok {
			if err := c.checkClaim(string(h.GetRPCHeader().Addr)); err != nil { // hostcheck.go
				s.claimRefused.Add(1)
				s.warn("refused an rpc whose claimed address is not the connection's", "error", err)
				if rpc.Reader != nil {
					return false
				}
				rpc.Respond(nil, err)
				return true
			}
		}
	}
	respCh := make(chan raft.RPCResponse, 1)
	fwd := raft.RPC{Command: rpc.Command, RespChan: respCh}
	var body *countingReader
	if rpc.Reader != nil {
		body = &countingReader{r: rpc.Reader}
		fwd.Reader = body
	}
	select {
	case s.consumer <- fwd:
	case <-c.done:
		return false
	case <-s.quit:
		return false
	}
	var resp raft.RPCResponse
	select {
	case resp = <-respCh:
	case <-c.done:
		return false
	case <-s.quit:
		return false
	}
	if body != nil && !body.eof {
		return false // a snapshot left unread (refused): close, do not answer
	}
	if resp.Error == nil {
		c.proven.Store(true)
	}
	rpc.RespChan <- resp // buffered by raft
	return true
}

// countingReader notes whether its reader was read to the end.
type countingReader struct {
	r   io.Reader
	eof bool
}

func (r *countingReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	if errors.Is(err, io.EOF) {
		r.eof = true
	}
	return n, err
}

// inConn is an accepted connection: the raw TCP connection, then (TLS) the
// server side of its TLS connection.
type inConn struct {
	net.Conn          // what raft reads and writes: raw, or the TLS connection over it
	raw      net.Conn // the accepted TCP connection
	s        *inbound
	done     chan struct{} // closed by Close
	scan     *frameScanner // follows the request bytes (only Read touches it)
	claim    claimCheck    // the last claimed address checked (only deliver touches it)

	mu      sync.Mutex
	pending []byte // bytes read during the handshake (plain TCP)
	peer    string // the server ID the certificate names (TLS); set once before established

	established atomic.Bool  // handshake done
	proven      atomic.Bool  // an RPC on it was answered without an error
	last        atomic.Int64 // unix nanos of the last byte read (or of the accept)
	once        sync.Once
	idled       atomic.Bool
	evicted     atomic.Bool
}

// peerID is the server ID the connection's certificate names: "" until its
// handshake is done, and over plain TCP. handshake sets peer before
// established is set, so any goroutine may read it once established; before
// that only the connection's own goroutine may (another, evicting it, would
// race with the handshake).
func (c *inConn) peerID() string {
	if !c.established.Load() {
		return ""
	}
	return c.peer
}

func (c *inConn) touch()              { c.last.Store(time.Now().UnixNano()) }
func (c *inConn) lastRead() time.Time { return time.Unix(0, c.last.Load()) }

// worseThan orders eviction: a connection still in its handshake goes
// first, then one that has proven nothing, then a proven one; within
// each, the one idle longer. Proven means: over TLS, the certificate names
// a current member (SetMembership; package election tells it the latest
// configuration), or, before any membership is known, an RPC on it was
// answered without an error; over plain TCP, an RPC on it was answered
// without an error (package election's admission layer does that only for
// members). A valid certificate alone proves nothing: a stranger's or a
// removed member's connection is evicted before any member's. So a flood
// of connections that stay idle, send a byte or garbage, never finish a
// handshake, or hold certificates of servers that are no members, evicts
// only its own kind while the cluster's connections stay.
func (c *inConn) worseThan(o *inConn) bool {
	if cr, or := c.rank(), o.rank(); cr != or {
		return cr < or
	}
	return c.last.Load() < o.last.Load()
}

func (c *inConn) rank() int {
	switch {
	case !c.established.Load():
		return 0
	case c.peer != "":
		if f := c.s.member.Load(); f != nil {
			if member, known := (*f)(c.peer); known {
				if member {
					return 2
				}
				return 1
			}
		}
	}
	if c.proven.Load() {
		return 2
	}
	return 1
}

// SetMembership tells t — which must be (or wrap, through MainLoopOnly or
// NewFaulty) a transport from NewTCP; ok is false otherwise — who the
// members are: member(id) reports whether server id is a member now, and
// known whether membership is known at all (a node waiting to join knows
// none). Over TLS, an inbound connection whose certificate names a
// member ranks as proven under MaxInbound, and one whose certificate names
// a stranger or a removed member is evicted first, whatever RPCs it sent
// before. package election calls it with raft's latest configuration.
// member is called with the transport's lock held: it must be fast and
// must not call back into the transport.
func SetMembership(t raft.Transport, member func(id string) (member, known bool)) (ok bool) {
	for {
		switch x := t.(type) {
		case mainLoopOnly:
			t = x.Transport
		case *Faulty:
			t = x.inner
		case *TCP:
			x.in.member.Store(&member)
			return true
		default:
			return false
		}
	}
}

// Read serves the bytes read during the handshake first, then reads with
// IdleTimeout as the deadline. An idle timeout ends the connection as a
// clean end of file (raft's decoder logs every other error).
func (c *inConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	if len(c.pending) > 0 {
		n := copy(b, c.pending)
		c.pending = c.pending[n:]
		c.mu.Unlock()
		return c.scanned(b, n, nil)
	}
	conn := c.Conn
	c.mu.Unlock()
	if err := c.raw.SetReadDeadline(time.Now().Add(c.s.idle)); err != nil {
		return 0, err
	}
	n, err := conn.Read(b)
	if n > 0 {
		c.touch()
	}
	if ne := net.Error(nil); err != nil && errors.As(err, &ne) && ne.Timeout() {
		c.idled.Store(true)
		return c.scanned(b, n, io.EOF)
	}
	return c.scanned(b, n, err)
}

// scanned passes the n bytes read into b through the frame scanner: bytes
// that break the decoding caps never reach raft's decoder, which gets an
// error instead and closes the connection.
func (c *inConn) scanned(b []byte, n int, err error) (int, error) {
	if n == 0 {
		return 0, err
	}
	if serr := c.scan.scan(b[:n]); serr != nil {
		c.s.frameRefused.Add(1)
		c.s.warn("closing an inbound connection: its request breaks the decoding caps",
			"remote", c.raw.RemoteAddr().String(), "peer", c.peer, "error", serr)
		return 0, serr
	}
	return n, err
}

// Write bounds each write of a response by the transport's Timeout, so a
// peer that stops reading cannot hold the connection's goroutine.
func (c *inConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	conn := c.Conn
	c.mu.Unlock()
	if err := c.raw.SetWriteDeadline(time.Now().Add(c.s.timeout)); err != nil {
		return 0, err
	}
	return conn.Write(b)
}

func (c *inConn) Close() error {
	var err error
	c.once.Do(func() {
		c.s.remove(c)
		if c.idled.Load() {
			c.s.idleClosed.Add(1)
		}
		close(c.done)
		err = c.raw.Close()
	})
	return err
}

// oneConn is the raft.StreamLayer of one inbound connection's
// NetworkTransport: Accept returns the connection once, then blocks until
// Close.
type oneConn struct {
	c      *inConn
	taken  atomic.Bool
	closed chan struct{}
	once   sync.Once
}

func (o *oneConn) Accept() (net.Conn, error) {
	if o.taken.CompareAndSwap(false, true) {
		return o.c, nil
	}
	<-o.closed
	return nil, raft.ErrTransportShutdown
}

func (o *oneConn) Close() error {
	o.once.Do(func() { close(o.closed) })
	return nil
}

func (o *oneConn) Addr() net.Addr { return o.c.raw.LocalAddr() }

func (o *oneConn) Dial(raft.ServerAddress, time.Duration) (net.Conn, error) {
	return nil, errors.New("transport: an inbound connection's transport does not dial")
}
