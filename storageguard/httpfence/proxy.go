package httpfence

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// DefaultProxyTimeout is the longest a proxied request may run when
// ProxyConfig.Timeout is zero.
const DefaultProxyTimeout = 30 * time.Second

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
	// Timeout bounds each forwarded request's exchange with the backend,
	// from admission on. When it expires the backend request is cancelled
	// (504 if no response header was sent yet, else the response is cut
	// off), and a newer epoch waiting for it may proceed. It does not bound
	// a client that is slow to send its body or to read the response: the
	// proxy sets no deadline on the client's connection, so such a client
	// holds its epoch's admission for as long as it takes. A client that
	// goes away does not cancel the backend request: the proxy waits for
	// the backend's answer (or the timeout), so that a newer epoch is not
	// forwarded while the backend may still be working on the older
	// request. Zero: DefaultProxyTimeout. Negative is invalid.
	Timeout time.Duration
	// ForwardToken sends the client's Fencing-Token header on to the backend.
	// False (the default): the header is stripped, so the backend never sees
	// a token it cannot check.
	ForwardToken bool
	// UnfencedReads lets GET and HEAD requests that carry no token through
	// to the backend without the fence (they are still bounded by Timeout).
	// Such reads are not ordered against epoch changes and may be stale.
	// A GET or HEAD that does carry a token is fenced like any request.
	// False (the default): a request without a token is refused with 401.
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
	// response body cut off mid-copy). Nil: the log package's standard
	// logger.
	ErrorLog *log.Logger
}

// Validate reports whether c is usable. The error wraps
// storageguard.ErrBadConfig.
func (c ProxyConfig) Validate() error {
	if c.Timeout < 0 {
		return fmt.Errorf("%w: negative proxy timeout %v", storageguard.ErrBadConfig, c.Timeout)
	}
	return nil
}

// proxy forwards the requests that NewProxy's handler admitted.
type proxy struct {
	rp      *httputil.ReverseProxy
	timeout time.Duration
}

// NewProxy returns a fencing proxy: an http.Handler that forwards requests
// to target only under an epoch that g admitted, for a resource that cannot
// check tokens itself (the seed's option 2). The proxy must be the only path
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
// epoch until the upgraded connection closes or is cut off at the timeout.
//
// NewProxy never panics: a Guard that cannot work (g.Err), a nil or
// relative target or an invalid cfg gives a handler that answers every
// request with 500 and forwards nothing.
func NewProxy(g *storageguard.Guard, target *url.URL, cfg ProxyConfig) http.Handler {
	h := &fenced{guard: g, resource: cfg.Resource}
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
	p := &proxy{timeout: cfg.Timeout}
	if p.timeout == 0 {
		p.timeout = DefaultProxyTimeout
	}
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
			if !forwardToken {
				pr.Out.Header.Del(epoch.Header)
				delete(pr.Out.Trailer, epoch.Header)
			}
		},
		Transport:    tr,
		ErrorLog:     cfg.ErrorLog,
		ErrorHandler: backendError,
		BufferPool:   copyBuffers{},
		ModifyResponse: func(res *http.Response) error {
			if res.StatusCode != http.StatusSwitchingProtocols {
				res.Body = drainOnClose{res.Body}
			}
			return nil
		},
	}
	h.serve = p.forward
	if cfg.UnfencedReads {
		h.unfenced = func(r *http.Request) bool { return r.Method == http.MethodGet || r.Method == http.MethodHead }
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
type drainOnClose struct{ io.ReadCloser }

func (b drainOnClose) Close() error {
	_, _ = io.Copy(io.Discard, b.ReadCloser)
	return b.ReadCloser.Close()
}

// backendError answers a request the backend failed: 504 when the proxy's
// timeout expired, 502 otherwise.
func backendError(w http.ResponseWriter, r *http.Request, err error) {
	status, code := http.StatusBadGateway, "backend_error"
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(r.Context().Err(), context.DeadlineExceeded) {
		status, code = http.StatusGatewayTimeout, "backend_timeout"
	}
	body := Refusal{Code: code, Error: "httpfence: backend: " + err.Error()}
	if a, ok := admissionFrom(r.Context()); ok {
		body.Resource, body.Presented = a.resource, &a.ep
	}
	writeJSON(w, status, body)
}

// forward sends r to the backend under ctx (which carries the admission, if
// any), bounded by the proxy's timeout, and returns once the response has
// been copied to w in full (or the copy failed, or the timeout cut it off).
//
// The backend request is not cancelled when the client goes away: the
// backend may be working on it, so the write (and with it the epoch) lasts
// until the backend has answered or the timeout cut it off.
func (p *proxy) forward(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.timeout)
	defer cancel()
	// Without full duplex, the server closes the request body as soon as
	// the response header is written, while the transport may still be
	// reading it to EOF; the transport then tears down the backend
	// connection mid-response. HTTP/2 is full duplex already (error).
	_ = http.NewResponseController(w).EnableFullDuplex()
	p.rp.ServeHTTP(w, r.WithContext(ctx))
}
