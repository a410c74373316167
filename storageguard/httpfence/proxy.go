package httpfence

import (
	"context"
	"encoding/json"
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
	// for each other. The name must be 1..MaxResourceLen bytes, else the
	// request is refused with 400. Nil: every request maps to one resource
	// named after the target (scheme, host and path, no user info or query).
	Resource func(*http.Request) string
	// Timeout bounds each forwarded request from admission to the last byte
	// of the response copied to the client. When it expires the backend
	// request is cancelled (504 if no response header was sent yet, else the
	// client connection is cut), and a newer epoch waiting for it may
	// proceed. A client that goes away does not cancel the backend request:
	// the proxy waits for the backend's answer (or the timeout), so that a
	// newer epoch is not forwarded while the backend may still be working on
	// the older request. Zero: DefaultProxyTimeout. Negative is invalid.
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

// Validate reports whether c is usable. The error wraps storageguard.ErrBadConfig.
func (c ProxyConfig) Validate() error {
	if c.Timeout < 0 {
		return fmt.Errorf("%w: negative proxy timeout %v", storageguard.ErrBadConfig, c.Timeout)
	}
	return nil
}

// Refusal is the JSON body of every response the proxy or Middleware
// generates itself instead of forwarding: a refused token or epoch, a bad
// request, or a backend failure.
type Refusal struct {
	// Code is a stable, machine-readable reason: stale_epoch,
	// conflicting_epoch, foreign_cluster, missing_token, malformed_token,
	// unsigned_token, bad_signature, unauthenticated, bad_resource,
	// misconfigured, fence_closed, fence_unavailable, canceled,
	// backend_error, backend_timeout.
	Code string `json:"code"`
	// Error is the error's text, for people.
	Error string `json:"error"`
	// Resource is the resource the request mapped to, if known.
	Resource string `json:"resource,omitempty"`
	// Presented is the epoch the request's token carried, when the token
	// was authentic.
	Presented *epoch.Epoch `json:"presented,omitempty"`
	// Highest is the highest epoch the fence had accepted for Resource when
	// the request was refused, if known.
	Highest *epoch.Epoch `json:"highest,omitempty"`
}

// HTTPStatus returns the HTTP status code and Refusal code for an error from a
// storageguard.Guard or a fence:
//
//   - 409 Conflict: storageguard.ErrStale, storageguard.ErrConflict (the epoch lost to a newer or
//     conflicting one; retrying with the same token cannot succeed);
//   - 401 Unauthorized: a missing, malformed or unsigned token;
//   - 403 Forbidden: a badly signed (forged) token, or one of another
//     cluster;
//   - 400 Bad Request: a bad resource name;
//   - 500: storageguard.ErrNoFence, storageguard.ErrBadConfig (checked first);
//   - 503: a closed or failing fence, a cancelled request.
func HTTPStatus(err error) (int, string) {
	switch {
	case err == nil:
		return http.StatusOK, ""
	case errors.Is(err, storageguard.ErrNoFence), errors.Is(err, storageguard.ErrBadConfig):
		return http.StatusInternalServerError, "misconfigured"
	case errors.Is(err, storageguard.ErrStale):
		return http.StatusConflict, "stale_epoch"
	case errors.Is(err, storageguard.ErrConflict):
		return http.StatusConflict, "conflicting_epoch"
	case errors.Is(err, storageguard.ErrForeignCluster):
		return http.StatusForbidden, "foreign_cluster"
	case errors.Is(err, epoch.ErrBadSignature):
		return http.StatusForbidden, "bad_signature"
	case errors.Is(err, epoch.ErrUnsigned):
		return http.StatusUnauthorized, "unsigned_token"
	case errors.Is(err, errNoToken):
		return http.StatusUnauthorized, "missing_token"
	case errors.Is(err, storageguard.ErrUnauthenticated):
		return http.StatusUnauthorized, "unauthenticated"
	case errors.Is(err, epoch.ErrMalformed):
		return http.StatusUnauthorized, "malformed_token"
	case errors.Is(err, storageguard.ErrBadResource):
		return http.StatusBadRequest, "bad_resource"
	case errors.Is(err, storageguard.ErrClosed):
		return http.StatusServiceUnavailable, "fence_closed"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, "canceled"
	}
	return http.StatusServiceUnavailable, "fence_unavailable"
}

// TokenFrom returns the request's one Fencing-Token header value. A missing
// or empty header is refused with storageguard.ErrUnauthenticated; several headers (or
// values), or one over epoch.MaxTokenLen bytes, with epoch.ErrMalformed: a
// proxy and a backend could otherwise read different ones.
func TokenFrom(r *http.Request) (string, error) {
	vals := r.Header.Values(epoch.Header)
	switch len(vals) {
	case 0:
		return "", fmt.Errorf("%w: %w", storageguard.ErrUnauthenticated, errNoToken)
	case 1:
		if vals[0] == "" {
			return "", fmt.Errorf("%w: %w", storageguard.ErrUnauthenticated, errNoToken)
		}
		if len(vals[0]) > epoch.MaxTokenLen {
			return "", fmt.Errorf("httpfence: %w: %s header is %d bytes, more than %d", epoch.ErrMalformed, epoch.Header, len(vals[0]), epoch.MaxTokenLen)
		}
		return vals[0], nil
	}
	return "", fmt.Errorf("httpfence: %w: %d %s headers, want one", epoch.ErrMalformed, len(vals), epoch.Header)
}

// errNoToken marks a request without a token; it is wrapped together with
// storageguard.ErrUnauthenticated.
var errNoToken = errors.New("no " + epoch.Header + " header")

// refuse writes the JSON Refusal for err. It reads the resource's highest
// epoch for the body unless the error carries it or the resource is unknown.
func refuse(w http.ResponseWriter, r *http.Request, g *storageguard.Guard, resource string, err error) {
	status, body := RefusalFor(resource, err)
	if body.Highest == nil && resource != "" && status != http.StatusInternalServerError && status != http.StatusBadRequest {
		if h, herr := g.Highest(r.Context(), resource); herr == nil && !h.IsZero() {
			body.Highest = &h
		}
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", epoch.Header)
	}
	writeJSON(w, status, body)
}

// RefusalFor returns the HTTP status (see HTTPStatus) and the JSON body that
// the proxy and Middleware answer for err, a refusal or failure from a storageguard.Guard
// or a fence, with the presented and highest epochs filled in when err
// carries them (*storageguard.StaleError, *storageguard.ConflictError, *storageguard.ForeignError). Servers that
// call storageguard.Guard.Do or a storageguard.Fence themselves use it to answer exactly as the proxy
// does.
func RefusalFor(resource string, err error) (int, Refusal) {
	status, code := HTTPStatus(err)
	body := Refusal{Code: code, Resource: resource}
	if err != nil {
		body.Error = err.Error()
	}
	var se *storageguard.StaleError
	var ce *storageguard.ConflictError
	var fe *storageguard.ForeignError
	switch {
	case errors.As(err, &se):
		body.Presented, body.Highest = &se.Presented, &se.Highest
	case errors.As(err, &ce):
		body.Presented, body.Highest = &ce.Presented, &ce.Highest
	case errors.As(err, &fe):
		body.Presented = &fe.Presented
	}
	return status, body
}

func writeJSON(w http.ResponseWriter, status int, body Refusal) {
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

var _ http.Handler = (*proxy)(nil)

// proxy is the handler NewProxy returns.
type proxy struct {
	guard         *storageguard.Guard
	rp            *httputil.ReverseProxy
	resource      func(*http.Request) string
	timeout       time.Duration
	unfencedReads bool
	err           error // non-nil: every request gets 500 with it
}

// NewProxy returns a fencing proxy: an http.Handler that forwards requests
// to target only under an epoch the storageguard.Guard admitted, for a resource that
// cannot check tokens itself (the seed's option 2). The proxy must be the
// only path to the resource: a request that goes around it is unfenced.
//
// Each request must carry exactly one token in the Fencing-Token header
// (epoch.Header). The proxy maps the request to a resource
// (ProxyConfig.Resource), and forwards it from inside storageguard.Guard.Do's write, so
// the proxy is the serialization point: a request admitted under an older
// epoch completes (its response copied to the client in full) or is cut off
// at ProxyConfig.Timeout before any request under a newer epoch is
// forwarded, and from then on the older epoch is refused. Requests under the
// same epoch are forwarded concurrently.
//
// Requests it does not forward get a JSON Refusal body and the status of
// HTTPStatus: 409 for a stale or conflicting epoch, 401 for a missing, malformed,
// unsigned or duplicated token, 403 for a forged token or one of another
// cluster, 400 for a bad resource name. A backend that fails gets 502, one
// that does not answer within the timeout 504; if it fails after the
// response header was sent, the client connection is aborted. A protocol
// upgrade (WebSocket) is forwarded like any request and holds its epoch until
// the upgraded connection closes or is cut off at the timeout.
//
// NewProxy never panics: a nil storageguard.Guard, a nil or relative target or an invalid
// cfg gives a handler that answers every request with 500 and forwards
// nothing.
func NewProxy(g *storageguard.Guard, target *url.URL, cfg ProxyConfig) http.Handler {
	p := &proxy{guard: g, resource: cfg.Resource, timeout: cfg.Timeout, unfencedReads: cfg.UnfencedReads}
	if p.timeout == 0 {
		p.timeout = DefaultProxyTimeout
	}
	switch {
	case cfg.Validate() != nil:
		p.err = cfg.Validate()
		return p
	case g == nil:
		p.err = storageguard.ErrNoFence
		return p
	case target == nil || target.Scheme == "" || target.Host == "":
		p.err = fmt.Errorf("%w: httpfence: proxy target %v is not an absolute URL", storageguard.ErrBadConfig, target)
		return p
	}
	if p.resource == nil {
		name := (&url.URL{Scheme: target.Scheme, Host: target.Host, Path: target.Path}).String()
		if err := storageguard.ValidateResource(name); err != nil {
			p.err = fmt.Errorf("%w: default resource name: %w", storageguard.ErrBadConfig, err)
			return p
		}
		p.resource = func(*http.Request) string { return name }
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
		ErrorHandler: p.backendError,
		BufferPool:   copyBuffers{},
		ModifyResponse: func(res *http.Response) error {
			if res.StatusCode != http.StatusSwitchingProtocols {
				res.Body = drainOnClose{res.Body}
			}
			return nil
		},
	}
	return p
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

// fwdKey carries a forwarded request's resource into the error handler.
type fwdKey struct{}

// backendError answers a request the backend failed: 504 when the proxy's
// timeout expired, 502 otherwise.
func (p *proxy) backendError(w http.ResponseWriter, r *http.Request, err error) {
	status, code := http.StatusBadGateway, "backend_error"
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(r.Context().Err(), context.DeadlineExceeded) {
		status, code = http.StatusGatewayTimeout, "backend_timeout"
	}
	resource, _ := r.Context().Value(fwdKey{}).(string)
	body := Refusal{Code: code, Error: "httpfence: backend: " + err.Error(), Resource: resource}
	if ep, ok := EpochFrom(r.Context()); ok {
		body.Presented = &ep
	}
	writeJSON(w, status, body)
}

// forward sends r to the backend under ctx, bounded by the proxy's timeout,
// and returns once the response has been copied to w in full (or the copy
// failed). A panic from the reverse proxy (http.ErrAbortHandler for a body
// cut off mid-copy) is recovered and returned, so that the caller can
// re-raise it after the fence's Do has returned.
//
// The backend request is not cancelled when the client goes away: the
// backend may be working on it, so the write (and with it the epoch) lasts
// until the backend has answered or the timeout cut it off.
func (p *proxy) forward(ctx context.Context, w http.ResponseWriter, r *http.Request, resource string) (panicked any) {
	ctx, cancel := context.WithTimeout(context.WithValue(context.WithoutCancel(ctx), fwdKey{}, resource), p.timeout)
	defer cancel()
	defer func() { panicked = recover() }()
	// Without full duplex, the server closes the request body as soon as
	// the response header is written, while the transport may still be
	// reading it to EOF; the transport then tears down the backend
	// connection mid-response. HTTP/2 is full duplex already (error).
	_ = http.NewResponseController(w).EnableFullDuplex()
	p.rp.ServeHTTP(w, r.WithContext(ctx))
	return nil
}

// errAborted is what the write returns when forwarding panicked.
var errAborted = errors.New("httpfence: forwarding aborted")

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.err != nil {
		refuse(w, r, p.guard, "", p.err)
		return
	}
	token, err := TokenFrom(r)
	if errors.Is(err, errNoToken) && p.unfencedReads && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		if pv := p.forward(r.Context(), w, r, ""); pv != nil {
			panic(pv)
		}
		return
	}
	resource := p.resource(r)
	if err == nil {
		err = storageguard.ValidateResource(resource)
	}
	if err != nil {
		refuse(w, r, p.guard, validResource(resource), err)
		return
	}
	var ran bool
	var panicked any
	err = p.guard.Do(r.Context(), resource, token, func(ctx context.Context, ep epoch.Epoch) error {
		ran = true
		if panicked = p.forward(withEpoch(ctx, ep), w, r, resource); panicked != nil {
			return errAborted
		}
		return nil
	})
	if panicked != nil {
		panic(panicked)
	}
	if ran {
		// The response, or the backend's failure, is already written.
		return
	}
	refuse(w, r, p.guard, resource, err)
}

// validResource returns resource if it is a valid name, else "" (a refusal
// does not echo a bad name back).
func validResource(resource string) string {
	if storageguard.ValidateResource(resource) != nil {
		return ""
	}
	return resource
}
