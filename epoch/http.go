package epoch

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Header is the HTTP header that carries a token.
const Header = "Fencing-Token"

// RoundTripper returns an http.RoundTripper that stamps every request with
// the token returned by token, in the Header header, and sends it with base
// (http.DefaultTransport when nil). token is called once per request, so a
// leader that lost its epoch stops stamping at once. When token fails, the
// request is not sent: RoundTrip closes the request body and returns the
// error. The caller's request is not modified.
//
// A token never leaves for a host it was not meant for: a request that an
// http.Client makes to follow a redirect (req.Response set) to another
// origin (scheme, host or port) than the first request's is not sent, with
// or without the token; RoundTrip returns an error wrapping ErrRedirect
// (sending it without the token could apply a write there unfenced).
// Redirects within the origin are stamped afresh.
func RoundTripper(base http.RoundTripper, token func() (string, error)) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &roundTripper{base: base, token: token}
}

type roundTripper struct {
	base  http.RoundTripper
	token func() (string, error)
}

func (rt *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	var tok string
	var err error
	if rt.token == nil {
		err = errNoTokenFunc
	} else {
		tok, err = rt.token()
	}
	if err == nil && tok == "" {
		err = errNoToken
	}
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("epoch: no fencing token for %s %s: %w", req.Method, req.URL.Redacted(), err)
	}
	if first := firstRequest(req); first != req && !sameOrigin(first.URL, req.URL) {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("%w: from %s to %s", ErrRedirect, origin(first.URL), origin(req.URL))
	}
	r := req.Clone(req.Context())
	r.Header.Set(Header, tok)
	return rt.base.RoundTrip(r)
}

// ErrRedirect is returned for a redirect of a request that carries (or would
// carry) a token to another origin than the request's own: the token is not
// sent there.
var ErrRedirect = errors.New("epoch: redirect to another origin refused: a fencing token is not sent there")

// CheckRedirect is an http.Client CheckRedirect policy for clients that set
// the Header themselves (http.Client copies it to every redirect, whatever
// the host): it refuses, with ErrRedirect, to follow a request that carries
// a token to another origin than the first request's, and stops after 10
// redirects as the default policy does.
func CheckRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if len(via) > 0 && !sameOrigin(via[0].URL, req.URL) && (req.Header.Get(Header) != "" || via[0].Header.Get(Header) != "") {
		return fmt.Errorf("%w: from %s to %s", ErrRedirect, origin(via[0].URL), origin(req.URL))
	}
	return nil
}

// firstRequest follows the chain of redirects back to the request the
// caller made.
func firstRequest(req *http.Request) *http.Request {
	for req.Response != nil && req.Response.Request != nil && req.Response.Request != req {
		req = req.Response.Request
	}
	return req
}

// sameOrigin reports whether a and b have one scheme, host and port (an
// absent port is not the scheme's default: different spellings are
// different origins, which only refuses more).
func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Host, b.Host)
}

func origin(u *url.URL) string { return u.Scheme + "://" + u.Host }
