package httpfence

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"slices"
	"sync"
	"time"
)

// Limits of the proxy's own backend transport.
const (
	// leanMaxBody is the largest request body the lean transport sends
	// itself; a larger one, or one of unknown length, goes through the
	// fallback http.Transport. The lean transport writes the whole request
	// before it reads the response, so a body is kept small enough to fit
	// in the socket buffers even if the backend answers without reading it.
	leanMaxBody = 16 << 10
	// leanMaxHeaderBytes bounds a response's header (and those of the 1xx
	// responses before it that nobody looked at), as http.Transport's
	// default MaxResponseHeaderBytes does.
	leanMaxHeaderBytes = 10 << 20
	// leanMax1xx bounds the informational responses before the final one.
	leanMax1xx = 5
	// leanBufSize is each backend connection's read and write buffer.
	leanBufSize = 4 << 10
)

// errLeanHeaderTooLarge is the read error of a response header longer than
// leanMaxHeaderBytes. The lean transport's errors carry no package prefix:
// the proxy's error handler adds "httpfence: backend: ".
var errLeanHeaderTooLarge = errors.New("response header too large")

// leanTransport is the proxy's default transport to a plain-HTTP target. It
// keeps a pool of persistent HTTP/1.1 connections to the target, and the
// goroutine that calls RoundTrip does the whole exchange itself: it writes
// the request (header and body in one write when the body is small), reads
// the response header, and the response body is read from the connection by
// whoever reads the returned body. No goroutine runs per connection or per
// request (http.Transport runs a reader and a writer goroutine per
// connection and hands each request and response between them, which costs
// a proxy hop on a busy machine more CPU than the rest of the hop).
//
// A connection goes back to the pool once its response body has been read
// to the end and neither side asked to close it; a body closed early, a read
// or write error, or a cancelled request closes it. Cancellation (the
// proxy's timeout) sets a past deadline on the connection, so a blocked read
// or write returns at once.
//
// Requests it does not handle simply go to fallback, an http.Transport:
// another scheme or host, a protocol upgrade, Expect: 100-continue, CONNECT,
// a body of unknown length or over leanMaxBody, request trailers.
//
// A reused connection is first checked for a close from the backend (one
// non-blocking peek, see newAliveCheck). If it fails anyway before any byte of
// the response arrived, a replayable request (GET, HEAD, OPTIONS or TRACE,
// or one with an Idempotency-Key header; without a body) is retried once on
// a new connection; any other request fails (the proxy answers 502), since
// the backend may have acted on it.
type leanTransport struct {
	urlHost     string // the req.URL.Host it serves
	addr        string // the address it dials, host:port
	dialer      net.Dialer
	fallback    *http.Transport
	maxIdle     int
	idleTimeout time.Duration

	mu   sync.Mutex
	idle []*leanConn // the most recently used last
}

var (
	_ http.RoundTripper = (*leanTransport)(nil)
	_ io.ReadCloser     = (*leanBody)(nil)
)

// newLeanTransport returns the lean transport for target, an http URL.
func newLeanTransport(target *url.URL, fallback *http.Transport) *leanTransport {
	port := target.Port()
	if port == "" {
		port = "80"
	}
	return &leanTransport{
		urlHost:     target.Host,
		addr:        net.JoinHostPort(target.Hostname(), port),
		dialer:      net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second},
		fallback:    fallback,
		maxIdle:     fallback.MaxIdleConnsPerHost,
		idleTimeout: fallback.IdleConnTimeout,
	}
}

// leanConn is one pooled connection.
type leanConn struct {
	conn   net.Conn
	alive  func() bool // whether the backend has left it usable, see newAliveCheck
	lr     limitReader
	br     *bufio.Reader
	bw     *bufio.Writer
	reused bool      // it served a request before this one
	idleAt time.Time // when it went back to the pool
}

// limitReader reads the connection for the bufio.Reader, failing once n
// bytes were read while the header is being parsed (n < 0: no limit).
type limitReader struct {
	conn net.Conn
	n    int64
}

func (r *limitReader) Read(p []byte) (int, error) {
	if r.n >= 0 {
		if r.n == 0 {
			return 0, errLeanHeaderTooLarge
		}
		if int64(len(p)) > r.n {
			p = p[:r.n]
		}
	}
	n, err := r.conn.Read(p)
	if r.n >= 0 {
		r.n -= int64(n)
	}
	return n, err
}

// connWriter hides the connection's ReadFrom from the bufio.Writer, so that
// a small request body is copied into the buffer after the header (one
// write) instead of being handed to the socket on its own.
type connWriter struct{ conn net.Conn }

func (w connWriter) Write(p []byte) (int, error) { return w.conn.Write(p) }

// requestWriter is what Request.Write writes to. Being an io.ByteWriter but
// not a *bufio.Writer, it keeps Request.Write from flushing the header
// before the body (it does so for any body not known to be in memory, such
// as a proxied request's); the transport flushes once, after the body.
type requestWriter struct{ bw *bufio.Writer }

func (w requestWriter) Write(p []byte) (int, error)       { return w.bw.Write(p) }
func (w requestWriter) WriteString(s string) (int, error) { return w.bw.WriteString(s) }
func (w requestWriter) WriteByte(c byte) error            { return w.bw.WriteByte(c) }
func (w requestWriter) ReadFrom(r io.Reader) (int64, error) {
	return w.bw.ReadFrom(r)
}

// handles reports whether the lean transport sends req itself.
func (t *leanTransport) handles(req *http.Request) bool {
	if req.URL == nil || req.URL.Scheme != "http" || req.URL.Host != t.urlHost || req.Method == http.MethodConnect {
		return false
	}
	if len(req.TransferEncoding) != 0 || len(req.Trailer) != 0 {
		return false
	}
	h := req.Header
	if len(h["Upgrade"]) != 0 || len(h["Expect"]) != 0 {
		return false
	}
	if req.Body != nil && req.Body != http.NoBody && (req.ContentLength <= 0 || req.ContentLength > leanMaxBody) {
		return false
	}
	return true
}

// RoundTrip sends req over a pooled connection, or through the fallback
// transport for what it does not handle.
func (t *leanTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.handles(req) {
		return t.fallback.RoundTrip(req)
	}
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		// Too late: the cancellation hook runs asynchronously and could
		// lose the race against a quick exchange on a pooled connection.
		closeBody(req)
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		c, err := t.get(ctx, attempt > 0)
		if err != nil {
			closeBody(req)
			return nil, err
		}
		if trace := httptrace.ContextClientTrace(ctx); trace != nil && trace.GotConn != nil {
			// From here on the backend may get bytes of the request.
			trace.GotConn(httptrace.GotConnInfo{Conn: c.conn, Reused: c.reused})
		}
		resp, retry, err := t.exchange(ctx, c, req)
		if err == nil {
			return resp, nil
		}
		if !retry || attempt > 0 {
			return nil, err
		}
	}
}

// closeBody closes the request body of a request that is not sent, as a
// RoundTripper must.
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// replayable reports whether req may be sent a second time after a reused
// connection failed before any response byte: http.Transport's rule, but
// only without a body (the transport does not rewind one with GetBody; a
// proxied request has none anyway).
func replayable(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, ok := req.Header["Idempotency-Key"]
	if !ok {
		_, ok = req.Header["X-Idempotency-Key"]
	}
	return ok
}

// aLongTimeAgo is the deadline that makes every blocked read and write on a
// connection return at once.
var aLongTimeAgo = time.Unix(1, 0)

// exchange sends req over c and reads the response header. On failure c is
// closed; retry says whether req may be sent again on another connection.
func (t *leanTransport) exchange(ctx context.Context, c *leanConn, req *http.Request) (resp *http.Response, retry bool, err error) {
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(aLongTimeAgo) })
	fail := func(err error, retry bool) (*http.Response, bool, error) {
		stop()
		_ = c.conn.Close()
		if cerr := ctx.Err(); cerr != nil {
			return nil, false, fmt.Errorf("%w (%v)", cerr, err)
		}
		return nil, retry, err
	}
	// Request.Write closes the body.
	werr := req.Write(requestWriter{c.bw})
	if werr == nil {
		werr = c.bw.Flush()
	}
	if werr != nil {
		// Nothing of the request may have arrived, or part of it; the
		// backend has not answered. Only a replayable request on a
		// connection the backend may have closed while idle is retried.
		return fail(werr, c.reused && replayable(req))
	}
	c.lr.n = leanMaxHeaderBytes
	if _, err := c.br.Peek(1); err != nil {
		// No byte of a response arrived (the first read cannot exceed the
		// header limit).
		return fail(err, c.reused && replayable(req))
	}
	n1xx := 0
	for {
		resp, err = http.ReadResponse(c.br, req)
		if err != nil {
			return fail(err, false)
		}
		code := resp.StatusCode
		if code < 100 || code > 199 {
			break
		}
		if code == http.StatusSwitchingProtocols {
			// Never asked for: upgrades go through the fallback.
			return fail(errors.New("unrequested 101 Switching Protocols"), false)
		}
		if n1xx++; n1xx > leanMax1xx {
			return fail(fmt.Errorf("more than %d informational responses", leanMax1xx), false)
		}
		if trace := httptrace.ContextClientTrace(ctx); trace != nil && trace.Got1xxResponse != nil {
			if err := trace.Got1xxResponse(code, textproto.MIMEHeader(resp.Header)); err != nil {
				return fail(err, false)
			}
			c.lr.n = leanMaxHeaderBytes
		}
	}
	c.lr.n = -1
	keep := !resp.Close && !req.Close
	if resp.Body == http.NoBody {
		// HEAD, 204, 304 or an empty body: the exchange is over.
		t.release(c, stop, keep)
		return resp, false, nil
	}
	resp.Body = &leanBody{t: t, c: c, ctx: ctx, rc: resp.Body, stop: stop, keep: keep}
	return resp, false, nil
}

// release ends an exchange on c: it goes back to the pool if keep, the
// cancellation hook had not fired and the backend sent nothing beyond the
// response, else it is closed.
func (t *leanTransport) release(c *leanConn, stop func() bool, keep bool) {
	if stop() && keep && c.br.Buffered() == 0 {
		t.put(c)
		return
	}
	_ = c.conn.Close()
}

// get returns an idle connection that the backend has not closed, or (none
// left, or fresh) a new one.
func (t *leanTransport) get(ctx context.Context, fresh bool) (*leanConn, error) {
	if !fresh {
		for {
			c := t.popIdle()
			if c == nil {
				break
			}
			if c.alive() {
				c.reused = true
				return c, nil
			}
			_ = c.conn.Close()
		}
	}
	conn, err := t.dialer.DialContext(ctx, "tcp", t.addr)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	c := &leanConn{conn: conn, alive: newAliveCheck(conn), lr: limitReader{conn: conn, n: -1}}
	c.br = bufio.NewReaderSize(&c.lr, leanBufSize)
	c.bw = bufio.NewWriterSize(connWriter{conn}, leanBufSize)
	return c, nil
}

// popIdle takes the most recently used idle connection that has not been
// idle for longer than idleTimeout, closing the expired ones.
func (t *leanTransport) popIdle() *leanConn {
	now := time.Now()
	var c *leanConn
	t.mu.Lock()
	expired := t.expireLocked(now)
	if n := len(t.idle); n > 0 {
		c = t.idle[n-1]
		t.idle[n-1] = nil
		t.idle = t.idle[:n-1]
	}
	t.mu.Unlock()
	closeConns(expired)
	return c
}

// put returns c to the pool, or closes it if the pool is full. It also
// closes the expired connections at the bottom of the pool: with fewer
// requests in flight than connections pooled, the bottom ones are never
// taken again.
func (t *leanTransport) put(c *leanConn) {
	now := time.Now()
	c.idleAt = now
	t.mu.Lock()
	expired := t.expireLocked(now)
	full := len(t.idle) >= t.maxIdle
	if !full {
		t.idle = append(t.idle, c)
	}
	t.mu.Unlock()
	if full {
		_ = c.conn.Close()
	}
	closeConns(expired)
}

// expireLocked removes from the pool, and returns for closing outside the
// lock, the connections idle for longer than idleTimeout at now: those at
// the bottom, the least recently used. Called with mu held.
func (t *leanTransport) expireLocked(now time.Time) []*leanConn {
	if t.idleTimeout <= 0 {
		return nil
	}
	n := 0
	for n < len(t.idle) && now.Sub(t.idle[n].idleAt) > t.idleTimeout {
		n++
	}
	if n == 0 {
		return nil
	}
	expired := slices.Clone(t.idle[:n])
	m := copy(t.idle, t.idle[n:])
	clear(t.idle[m:])
	t.idle = t.idle[:m]
	return expired
}

func closeConns(cs []*leanConn) {
	for _, c := range cs {
		_ = c.conn.Close()
	}
}

// CloseIdleConnections closes the pooled connections and the fallback
// transport's idle ones.
func (t *leanTransport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	closeConns(idle)
	t.fallback.CloseIdleConnections()
}

// errLeanBodyClosed is the error of a read after Close.
var errLeanBodyClosed = errors.New("read on closed response body")

// leanBody is a response body read straight from its connection. At its end
// the connection goes back to the pool; an error or an early Close closes
// it.
type leanBody struct {
	t    *leanTransport
	ctx  context.Context
	rc   io.ReadCloser // the body as http.ReadResponse returned it
	stop func() bool
	keep bool

	mu  sync.Mutex
	c   *leanConn // nil once the connection was released
	err error     // what Read returns once c is nil
}

func (b *leanBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.c == nil {
		return 0, b.err
	}
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		b.finish(b.keep, io.EOF)
	case err != nil:
		if cerr := b.ctx.Err(); cerr != nil {
			err = fmt.Errorf("response body: %w (%v)", cerr, err)
		}
		b.finish(false, err)
	}
	return n, err
}

// Close closes the connection unless the body was read to its end.
func (b *leanBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.c != nil {
		b.finish(false, errLeanBodyClosed)
	}
	return nil
}

// finish releases the connection; later reads return err. Called with mu
// held.
func (b *leanBody) finish(keep bool, err error) {
	b.t.release(b.c, b.stop, keep)
	b.c, b.err = nil, err
}
