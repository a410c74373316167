package epoch

import (
	"fmt"
	"net/http"
)

// Header is the HTTP header that carries a token.
const Header = "Fencing-Token"

// RoundTripper returns an http.RoundTripper that stamps every request with
// the token returned by token, in the Header header, and sends it with base
// (http.DefaultTransport when nil). token is called once per request, so a
// leader that lost its epoch stops stamping at once. When token fails, the
// request is not sent: RoundTrip closes the request body and returns the
// error. The caller's request is not modified.
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
	r := req.Clone(req.Context())
	r.Header.Set(Header, tok)
	return rt.base.RoundTrip(r)
}
