package httpfence

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// DefaultProxyTimeout is the longest a proxied request may run when
// ProxyConfig.Timeout is zero.
const DefaultProxyTimeout = 30 * time.Second

// writeGrace is how much longer than ProxyConfig.Timeout the client's
// connection may take to accept the response, and how long it has to
// accept the proxy's own answer to a failed backend exchange, counted from
// when the proxy writes it: time to write the 504 of a backend that did not
// answer in time to a client that reads, however late the proxy got to it.
const writeGrace = 100 * time.Millisecond

// ProxyConfig configures a fencing proxy. The zero value is valid: one
// resource for the whole target, a 30 s timeout, the token stripped, every
// request (reads too) refused without a token.
type ProxyConfig struct {
	// Resource maps a request to the fenced resource it writes. Each resource
	// has its own highest epoch; requests for different resources do not wait
	// for each other. The name must be 1..storageguard.MaxResourceLen
	// bytes, else the request is refused with 400. Nil: every request maps
	// to one resource named after the target (scheme, host and path, no user
	// info or query).
	Resource func(*http.Request) string
	// Timeout bounds each forwarded request from admission on: reading the
	// client's body, the exchange with the backend and writing the response
	// to the client. When it expires the backend request is cancelled and
	// deadlines on the client's connection cut off a client that is still
	// sending its body or (100 ms later, time to write a 504) not reading
	// the response (504 if no response header was sent yet, else the
	// response is cut off). A cut-off request is logged (ErrorLog) and
	// counted (Stats); unless the backend had answered in full, its backend
	// connection is then cut and the request held for BackendTimeout
	// before a newer epoch waiting for it proceeds. A client that goes
	// away does not cancel the backend request: the proxy waits for the
	// backend's answer (or the timeout), so that a newer epoch is not
	// forwarded while the backend may still be working on the older
	// request; if the exchange fails after some of the request may have
	// reached the backend (the client went away mid-body, the backend
	// connection broke), nothing says the backend is done, and the request
	// is held the same way (ProxyStats counts these as Held). Zero:
	// DefaultProxyTimeout.
	// Negative is invalid.
	Timeout time.Duration
	// BackendTimeout is the backend's own timeout as the backend contract
	// (see the package doc, "The backend contract") states it: the longest
	// the backend may still act on a request after the last byte of it
	// reached the backend. A request the backend did not answer in full is
	// held, after the proxy cut its backend connection, for this long: no
	// newer epoch is forwarded for its resource before. Zero: Timeout.
	// Negative is invalid.
	BackendTimeout time.Duration
	// Stats, if set, counts the requests the proxy cut off at Timeout.
	Stats *ProxyStats
	// ForwardToken sends the client's Fencing-Token header on to the backend.
	// False (the default): the header is stripped, so the backend never sees
	// a token it cannot check. Either way every other spelling of the header
	// that a backend could read as the token (Fencing_Token, FENCING_TOKEN,
	// HTTP_FENCING_TOKEN: names that equal FENCING_TOKEN or
	// HTTP_FENCING_TOKEN once upper-cased with '-' read as '_', as CGI and
	// WSGI map them) is stripped from the header and the trailer: the proxy
	// verified one token, and the backend must not read another.
	ForwardToken bool
	// UnfencedReads lets GET and HEAD requests that carry no token through
	// to the backend without the fence (they are still bounded by Timeout).
	// Such reads are not ordered against epoch changes and may be stale.
	// Only a plain read qualifies: a GET or HEAD with a body (Content-Length
	// or Transfer-Encoding) or with a method-override header
	// (X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override, in any
	// spelling) may be a write to the backend, and needs a token like any
	// request; so does one that asks for a protocol upgrade (an Upgrade
	// header, or a Connection header naming upgrade, in any spelling: the
	// upgraded connection is a raw channel to the backend), and CONNECT.
	// A GET or HEAD that does carry a token is fenced like any
	// request. False (the default): a request without a token is refused
	// with 401.
	UnfencedReads bool
	// Transport sends requests to the backend. Nil: a transport of the
	// proxy's own. For an http target it keeps up to 256 idle HTTP/1.1
	// connections to the backend (so hundreds of concurrent clients reuse
	// connections) and the handling goroutine itself writes each request and
	// reads its response, without the per-connection goroutines of
	// http.Transport. No timer runs: a connection idle for more than 90 s is
	// closed the next time the pool is used, and one the backend closed
	// while idle is noticed (one non-blocking peek) before reuse. A
	// request failing on a reused connection before any response byte is
	// retried once on a new one only if it is replayable (GET, HEAD,
	// OPTIONS, TRACE, or with an Idempotency-Key header; without a body).
	// Protocol upgrades, Expect: 100-continue, request bodies of unknown
	// length or over 16 KiB, and https targets go through an http.Transport
	// with the same pool size that ignores proxy environment variables and
	// never adds compression of its own. Pass your own to control its
	// lifetime (CloseIdleConnections) or its TLS.
	Transport http.RoundTripper
	// ErrorLog receives errors the proxy cannot report to the client (a
	// response body cut off mid-copy, a request cut off at Timeout, a fence
	// lost while a request was forwarded). Nil: the log package's standard
	// logger.
	ErrorLog *log.Logger
}

// Validate reports whether c is usable. The error wraps
// storageguard.ErrBadConfig.
func (c ProxyConfig) Validate() error {
	if c.Timeout < 0 {
		return fmt.Errorf("%w: negative proxy timeout %v", storageguard.ErrBadConfig, c.Timeout)
	}
	if c.BackendTimeout < 0 {
		return fmt.Errorf("%w: negative backend timeout %v", storageguard.ErrBadConfig, c.BackendTimeout)
	}
	return nil
}

// proxy forwards the requests that NewProxy's handler admitted.
type proxy struct {
	rp      *httputil.ReverseProxy
	timeout time.Duration
	// backendTimeout is ProxyConfig.BackendTimeout (Timeout if zero).
	backendTimeout time.Duration
	stats          *ProxyStats // nil: not counted
	log            *log.Logger // nil: the log package's standard logger
	// unbounded is done once the proxy has logged that it could not set
	// a client connection's deadlines.
	unbounded sync.Once
}

// ProxyStats counts what proxies cut off. The zero value is ready; it is
// safe for concurrent use, and several proxies may share one.
type ProxyStats struct {
	timedOut atomic.Uint64
	held     atomic.Uint64
}

// Held returns how many requests the proxy held, after they ended and
// their backend connection was cut, for ProxyConfig.BackendTimeout because
// the backend may still have been acting on them: some of the request may
// have reached the backend and it did not answer in full (the client went
// away mid-request, the backend connection broke, the timeout cut the
// exchange off: those are counted in TimedOut too; or, upgraded, the
// backend closed its side while the client's was still open).
func (s *ProxyStats) Held() uint64 { return s.held.Load() }

// TimedOut returns how many requests were cut off at ProxyConfig.Timeout:
// the backend had not answered, or the client had not sent its body or
// read the response, in time.
func (s *ProxyStats) TimedOut() uint64 { return s.timedOut.Load() }

// NewProxy returns a fencing proxy: an http.Handler that forwards requests
// to target only under an epoch that g admitted, for a resource that cannot
// check tokens itself (a fencing proxy: the resource's only way in checks the token for it). The proxy must be the only path
// to the resource: a request that goes around it is unfenced.
//
// Each request must carry exactly one token in the Fencing-Token header
// (epoch.Header). The proxy maps the request to a resource
// (ProxyConfig.Resource), and forwards it from inside g.Do's write, so the
// proxy is the serialization point: a request admitted under an older epoch
// completes (its response copied to the client in full) or is cut off at
// ProxyConfig.Timeout before any request under a newer epoch is forwarded,
// and from then on the older epoch is refused. Requests under the same
// epoch are forwarded concurrently.
//
// Requests it does not forward get a JSON Refusal body and the status of
// HTTPStatus: 409 for a stale or conflicting epoch, 401 for a missing,
// malformed, unsigned or duplicated token, 403 for a forged token or one of
// another cluster, 400 for a bad resource name. A backend that fails gets
// 502, one that does not answer within the timeout 504; if it fails after
// the response header was sent, the client connection is aborted. A
// protocol upgrade (WebSocket) is forwarded like any request and holds its
// epoch for as long as the upgraded connection is open, and for
// BackendTimeout after it unless the backend closed its side after the
// client's end was passed on to it (see "The backend contract" in the
// package doc). The timeout bounds the upgraded connection as a whole: it
// is cut off then, whichever side keeps it open. After a restart a newer
// epoch waits as the package doc says; request paths are made canonical
// first.
//
// NewProxy never panics: a Guard that cannot work (g.Err), a nil or
// relative target or an invalid cfg gives a handler that answers every
// request with 500 and forwards nothing.
func NewProxy(g *storageguard.Guard, target *url.URL, cfg ProxyConfig) http.Handler {
	h := &fenced{guard: g, resource: cfg.Resource, errorLog: cfg.ErrorLog}
	switch {
	case cfg.Validate() != nil:
		h.err = cfg.Validate()
		return h
	case g.Err() != nil:
		h.err = g.Err()
		return h
	case target == nil || target.Scheme == "" || target.Host == "":
		h.err = fmt.Errorf("%w: httpfence: proxy target %v is not an absolute URL", storageguard.ErrBadConfig, target)
		return h
	}
	if h.resource == nil {
		name := (&url.URL{Scheme: target.Scheme, Host: target.Host, Path: target.Path}).String()
		if err := storageguard.ValidateResource(name); err != nil {
			h.err = fmt.Errorf("%w: httpfence: default resource name: %w", storageguard.ErrBadConfig, err)
			return h
		}
		h.resource = func(*http.Request) string { return name }
	}
	p := &proxy{timeout: cfg.Timeout, backendTimeout: cfg.BackendTimeout, stats: cfg.Stats, log: cfg.ErrorLog}
	if p.timeout == 0 {
		p.timeout = DefaultProxyTimeout
	}
	if p.backendTimeout == 0 {
		p.backendTimeout = p.timeout
	}
	h.startup = newStartup(g, p.maxHold())
	h.canonical = canonicalPath
	tr := cfg.Transport
	if tr == nil {
		tr = newTransport(target)
	}
	target = cloneURL(target)
	forwardToken := cfg.ForwardToken
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
			stripTokenSpellings(pr.Out.Header, forwardToken)
			stripTokenSpellings(pr.Out.Trailer, forwardToken)
		},
		Transport:    tr,
		ErrorLog:     cfg.ErrorLog,
		ErrorHandler: backendError,
		BufferPool:   copyBuffers{},
		ModifyResponse: func(res *http.Response) error {
			ex, _ := res.Request.Context().Value(exchangeKey{}).(*exchange)
			if res.StatusCode == http.StatusSwitchingProtocols {
				if rwc, ok := res.Body.(io.ReadWriteCloser); ok && ex != nil {
					res.Body = &upgradedBackend{ReadWriteCloser: rwc, ex: ex}
				}
				return nil
			}
			res.Body = &drainOnClose{ReadCloser: res.Body, ex: ex}
			return nil
		},
	}
	h.serve = p.forward
	if cfg.UnfencedReads {
		h.unfenced = plainRead
	}
	return h
}

func cloneURL(u *url.URL) *url.URL {
	c := *u
	if u.User != nil {
		uc := *u.User
		c.User = &uc
	}
	return &c
}

// newTransport is the default backend transport: for an http target the
// lean transport (see leanTransport), falling back to an http.Transport with
// http.DefaultTransport's settings, without proxy environment variables, with
// enough idle connections per host for many concurrent clients; for any
// other target that http.Transport alone.
func newTransport(target *url.URL) http.RoundTripper {
	fallback := newHTTPTransport()
	if target.Scheme == "http" {
		return newLeanTransport(target, fallback)
	}
	return fallback
}

func newHTTPTransport() *http.Transport {
	return &http.Transport{
		DialContext: (&net.Dialer{
			Timeout:   30 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:     true,
		DisableCompression:    true, // pass bodies through as the backend sent them
		MaxIdleConns:          512,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: 1 * time.Second,
	}
}

// copyBuffers recycles the buffers the reverse proxy copies response bodies
// through; without it each request allocates (and clears) 32 KiB.
type copyBuffers struct{}

var copyBufferPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (copyBuffers) Get() []byte  { return *copyBufferPool.Get().(*[]byte) }
func (copyBuffers) Put(b []byte) { copyBufferPool.Put(&b) }

// drainOnClose reads a backend response body to its end before closing it.
// When copying to the client fails (the client went away), the reverse proxy
// closes the body early; draining it instead lets the backend finish the
// request before the write returns and a newer epoch may be forwarded. The
// reads are bounded by the proxy's timeout, which cancels them.
//
// It also tells the request's exchange when the body ended (io.EOF): the
// backend has answered in full.
type drainOnClose struct {
	io.ReadCloser
	ex *exchange // nil: nobody listens
}

func (b *drainOnClose) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && b.ex != nil {
		b.ex.answered.Store(true)
	}
	return n, err
}

func (b *drainOnClose) Close() error {
	_, _ = io.Copy(io.Discard, struct{ io.Reader }{b})
	return b.ReadCloser.Close()
}

// upgradedBackend is the backend's side of an upgraded (101) connection.
// The backend is done with it once it closed it (a read returns io.EOF); a
// connection the proxy closed first, because the client went away or the
// timeout passed, leaves the backend possibly still acting on what it got.
type upgradedBackend struct {
	io.ReadWriteCloser
	ex *exchange
}

// Read reads from the backend. Its end (io.EOF) tells that the backend is
// done only if the client's direction had ended before (CloseWrite): a
// backend that closed its sending side first may still read and act on
// what the client sends, until both directions ended.
func (u *upgradedBackend) Read(p []byte) (int, error) {
	n, err := u.ReadWriteCloser.Read(p)
	if err == io.EOF && u.ex.clientEnded.Load() {
		u.ex.answered.Store(true)
	}
	return n, err
}

// CloseWrite passes the end of the client's direction on to the backend
// (the reverse proxy calls it when the client's side reached EOF).
func (u *upgradedBackend) CloseWrite() error {
	u.ex.clientEnded.Store(true)
	if cw, ok := u.ex.backendConn().(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// exchange is what the proxy learns of one request's exchange with the
// backend, to decide whether the backend is provably done with it when
// the reverse proxy returns.
type exchange struct {
	// sent: a connection to the backend was obtained, so some bytes of the
	// request may have reached it.
	sent atomic.Bool
	// answered: the backend's response was read to its end (or, upgraded,
	// the backend closed the connection after the client's direction
	// ended).
	answered atomic.Bool
	// clientEnded: upgraded, the client's direction to the backend ended.
	clientEnded atomic.Bool
	// connMu guards conn, the backend connection of the last attempt
	// (httptrace.GotConnInfo), which the proxy cuts when the backend may
	// still act on the request.
	connMu sync.Mutex
	conn   net.Conn
	// failed is the error of an exchange that got no response (nil: it got
	// one, or it failed before a connection was obtained, with a dial
	// error).
	failed error
	// client is the client's ResponseWriter as the reverse proxy sees it.
	client boundedHijack
}

// boundedHijack is the client's ResponseWriter with the proxy's deadlines
// put back on the connection when the reverse proxy hijacks it for an
// upgraded (101) exchange. net/http clears a hijacked connection's
// deadlines, and the reverse proxy copies both ways until both directions
// have ended: without them a client that keeps its side open after the
// backend closed its own would keep the request, and so the epoch, for
// ever, and every newer epoch waiting for it.
type boundedHijack struct {
	http.ResponseWriter
	deadline time.Time
}

func (b *boundedHijack) Unwrap() http.ResponseWriter { return b.ResponseWriter }

func (b *boundedHijack) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(b.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if err := errors.Join(conn.SetReadDeadline(b.deadline), conn.SetWriteDeadline(b.deadline.Add(writeGrace))); err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("httpfence: bounding the upgraded connection: %w", err)
	}
	return conn, brw, nil
}

// gotConn records the backend connection the request goes over and makes
// its close a reset (SO_LINGER 0): whatever of the request is still
// unsent, or unread by the backend, is discarded when the connection is
// closed, so the backend cannot read a byte of the request after the proxy
// cut it off.
func (ex *exchange) gotConn(info httptrace.GotConnInfo) {
	ex.sent.Store(true)
	if tc, ok := info.Conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	ex.connMu.Lock()
	ex.conn = info.Conn
	ex.connMu.Unlock()
}

func (ex *exchange) backendConn() net.Conn {
	ex.connMu.Lock()
	defer ex.connMu.Unlock()
	return ex.conn
}

// exchangeKey is the context key of a request's *exchange.
type exchangeKey struct{}

// mayAct reports whether the backend may still act on the request: some of
// it may have reached the backend and the backend did not answer in full.
// A failed exchange counts as sent unless it failed to dial: a transport
// that reports no connection (httptrace.ClientTrace.GotConn) is assumed to
// have sent something.
func (ex *exchange) mayAct() bool {
	if ex.answered.Load() {
		return false
	}
	if ex.sent.Load() {
		return true
	}
	var op *net.OpError
	return ex.failed != nil && !(errors.As(ex.failed, &op) && op.Op == "dial")
}

// backendError answers a request the backend failed: 504 when the proxy's
// timeout expired, 502 otherwise.
//
// If the backend may still act on the request (see exchange.mayAct), the
// proxy will hold the request's epoch until its timeout: the answer is then
// sent at once, complete (with its length), and over HTTP/1.1 with
// Connection: close, so that the client neither waits for the hold to end
// nor sends its next request on this connection.
func backendError(w http.ResponseWriter, r *http.Request, err error) {
	ex, _ := r.Context().Value(exchangeKey{}).(*exchange)
	if ex != nil {
		ex.failed = err
	}
	status, code := http.StatusBadGateway, "backend_error"
	// The timer that ends the context may run after a network deadline set
	// from the same instant fired (a dial's "i/o timeout"): the deadline
	// itself decides.
	dl, ok := r.Context().Deadline()
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(r.Context().Err(), context.DeadlineExceeded) || (ok && !time.Now().Before(dl)) {
		status, code = http.StatusGatewayTimeout, "backend_timeout"
	}
	body := Refusal{Code: code, Error: "httpfence: backend: " + err.Error()}
	// The write deadline forward set ran from the backend's deadline; on a
	// loaded machine the proxy may get here after it has passed, and the
	// client would lose its answer (a reset instead of the 504). The grace
	// runs from now: the answer is short, and the hold does not depend on it.
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(writeGrace))
	if a, ok := admissionFrom(r.Context()); ok {
		body.Resource, body.Presented = a.resource, &a.ep
	}
	if ex == nil || !ex.mayAct() {
		writeJSON(w, status, body)
		return
	}
	b, _ := json.Marshal(body)
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Length", strconv.Itoa(len(b)))
	if r.ProtoMajor == 1 {
		h.Set("Connection", "close")
	}
	writeJSONBytes(w, status, b)
	_ = rc.Flush()
}

// forward sends r to the backend under ctx (which carries the admission, if
// any), bounded by the proxy's timeout, and returns once the response has
// been copied to w in full (or the copy failed, or the timeout cut it off).
//
// The backend request is not cancelled when the client goes away: the
// backend may be working on it, so the write (and with it the epoch) lasts
// until the backend has answered or the timeout cut it off. The client's
// connection gets the same deadline, for reading (the request body, which
// the transport reads while it writes the backend request) and for writing
// (the response): without it a client that trickles its body, or does not
// read a large response, would hold the epoch's admission for as long as
// it likes, and every later request for the resource with it.
func (p *proxy) forward(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	deadline := start.Add(p.timeout)
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	rc := http.NewResponseController(w)
	// Without full duplex, the server closes the request body as soon as
	// the response header is written, while the transport may still be
	// reading it to EOF; the transport then tears down the backend
	// connection mid-response. (HTTP/2 always is full duplex.)
	// Errors: a ResponseWriter that cannot do this (a wrapper in front of
	// the proxy without Unwrap); the backend exchange is still bounded by
	// ctx, but a slow client is not, and the operator hears of it once.
	if err := errors.Join(rc.EnableFullDuplex(), rc.SetReadDeadline(deadline), rc.SetWriteDeadline(deadline.Add(writeGrace))); err != nil {
		p.unbounded.Do(func() {
			p.logf("httpfence: the proxy cannot set the client connection's deadlines (%v): a ResponseWriter wrapper in front of it lacks Unwrap() http.ResponseWriter, so a client that trickles its body or does not read the answer is not cut off at the timeout", err)
		})
	}
	ex := &exchange{client: boundedHijack{ResponseWriter: w, deadline: deadline}}
	ctx = context.WithValue(ctx, exchangeKey{}, ex)
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: ex.gotConn})
	defer func() {
		// Also when the copy to the client failed and the reverse proxy
		// aborts the handler (panic(http.ErrAbortHandler)).
		if !time.Now().Before(deadline) {
			p.cut(ctx, r, time.Since(start))
		}
		if ex.mayAct() {
			// The client went away mid-request, the backend connection
			// broke or the timeout cut the exchange off, while the
			// backend may have (part of) the request and may still act
			// on it. Cut its connection (a reset: no byte of the request
			// can reach the backend from now on), then hold for the
			// backend's own timeout, which the contract counts from the
			// last byte it got.
			if c := ex.backendConn(); c != nil {
				_ = c.Close()
			}
			p.hold(ctx, r, ex, time.Now().Add(p.backendTimeout))
		}
	}()
	out := r.WithContext(ctx)
	if r.Body != nil && r.Body != http.NoBody {
		out.Body = errorDropsBody{r.Body}
	}
	p.rp.ServeHTTP(&ex.client, out)
}

// errorDropsBody is a request body that forwards nothing of a read that
// ended in an error: net/http's chunked reader returns the data of a chunk
// together with the framing error found right after it (a chunk extension
// with a quoted line break makes it take the bytes after the break as the
// chunk's data), and those bytes are garbage. Data returned by an earlier,
// successful read (the chunk's data arrived before the bytes that break the
// framing) has been forwarded already; the backend then sees the body cut
// off, never ended.
type errorDropsBody struct{ io.ReadCloser }

func (b errorDropsBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		return 0, err
	}
	return n, err
}

// hold keeps the request's hold on its epoch until until: the backend may
// still act on a request it did not answer in full.
func (p *proxy) hold(ctx context.Context, r *http.Request, ex *exchange, until time.Time) {
	if p.stats != nil {
		p.stats.held.Add(1)
	}
	what := "unfenced read"
	if a, ok := admissionFrom(ctx); ok {
		what = fmt.Sprintf("resource %q under %s", a.resource, a.ep)
	}
	why := "the backend did not answer in full"
	if ex.failed != nil {
		why = ex.failed.Error()
	}
	p.logf("httpfence: %s %s for %s from %s ended before the backend answered (%s): its backend connection is cut and the request held for the backend timeout %v, since the backend may still act on it", r.Method, r.URL.Path, what, r.RemoteAddr, why, p.backendTimeout)
	if d := time.Until(until); d > 0 {
		t := time.NewTimer(d)
		<-t.C
	}
}

// cut logs and counts a request that the timeout cut off.
func (p *proxy) cut(ctx context.Context, r *http.Request, took time.Duration) {
	if p.stats != nil {
		p.stats.timedOut.Add(1)
	}
	what := "unfenced read"
	if a, ok := admissionFrom(ctx); ok {
		what = fmt.Sprintf("resource %q under %s", a.resource, a.ep)
	}
	p.logf("httpfence: %s %s for %s from %s cut off at the proxy timeout %v (after %v); its hold on the epoch is released", r.Method, r.URL.Path, what, r.RemoteAddr, p.timeout, took.Round(time.Millisecond))
}

// logf logs to ProxyConfig.ErrorLog, or the standard logger.
func (p *proxy) logf(format string, a ...any) {
	if p.log != nil {
		p.log.Printf(format, a...)
	} else {
		log.Printf(format, a...)
	}
}

// plainRead reports whether r may go through unfenced under UnfencedReads:
// a GET or HEAD with no body, no method override and no protocol upgrade.
// An upgrade (an Upgrade header, or a Connection header that names
// upgrade, in any spelling) turns the request into a raw channel to the
// backend that carries whatever the client sends: it is a write. CONNECT
// is no GET.
func plainRead(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	if r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
		return false
	}
	for k, vs := range r.Header {
		switch headerKey(k) {
		case "X_HTTP_METHOD_OVERRIDE", "X_HTTP_METHOD", "X_METHOD_OVERRIDE", "UPGRADE":
			return false
		case "CONNECTION":
			for _, v := range vs {
				if strings.Contains(strings.ToLower(v), "upgrade") {
					return false
				}
			}
		}
	}
	return true
}

// headerKey is a header name as CGI and WSGI see it: upper case, '-' as
// '_'. Names that differ in the request map to one variable there.
func headerKey(name string) string {
	b := []byte(name)
	for i, c := range b {
		switch {
		case c == '-':
			b[i] = '_'
		case 'a' <= c && c <= 'z':
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// stripTokenSpellings removes from h every header a backend could read as
// the token: each name that is FENCING_TOKEN or HTTP_FENCING_TOKEN as
// headerKey spells it, except epoch.Header itself when keep.
func stripTokenSpellings(h http.Header, keep bool) {
	for k := range h {
		switch headerKey(k) {
		case "FENCING_TOKEN", "HTTP_FENCING_TOKEN":
			if keep && k == epoch.Header {
				continue
			}
			delete(h, k)
		}
	}
}
