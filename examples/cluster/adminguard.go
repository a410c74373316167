package main

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// The node's state-changing endpoints (POST /write, /resign, /join,
// /transfer, /remove, /fault) must not be reachable from a web page the
// operator happens to visit. A browser lets any page POST to any address
// without asking anyone — but only with a "simple" content type
// (text/plain, a form) and with the page's Origin attached. So every
// state-changing request must:
//
//   - say Content-Type: application/json (a cross-site page cannot send
//     that without a CORS preflight, which this API never grants), and
//   - carry no Origin, or the API's own (a same-origin page, such as the
//     status page at /, may call it; curl and the nodes send none), and
//     no Sec-Fetch-Site other than same-origin or none.
//
// Refused requests change nothing: the check runs before the body is read.

// mutating wraps a state-changing handler with the method, content-type and
// origin checks.
func mutating(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !allow(w, r, http.MethodPost) {
			return
		}
		if err := sameOrigin(r); err != nil {
			writeError(w, http.StatusForbidden, "node: "+err.Error())
			return
		}
		mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || mt != "application/json" {
			writeError(w, http.StatusUnsupportedMediaType,
				fmt.Sprintf("node: %s %s: Content-Type must be application/json, not %q", r.Method, r.URL.Path, r.Header.Get("Content-Type")))
			return
		}
		h(w, r)
	}
}

// sameOrigin refuses a request a browser sent on behalf of another site.
func sameOrigin(r *http.Request) error {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return fmt.Errorf("cross-site request refused (Sec-Fetch-Site: %s)", site)
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return fmt.Errorf("cross-site request refused (Origin %q)", origin)
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if u.Scheme != scheme || !strings.EqualFold(u.Host, r.Host) {
		return fmt.Errorf("cross-site request refused (Origin %s is not %s://%s)", origin, scheme, r.Host)
	}
	return nil
}

// checkHostPort accepts "host:port" with a non-empty host and a port in
// 1..65535: a Raft or HTTP address another node can dial.
func checkHostPort(what, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q is not host:port", what, addr)
	}
	if host == "" || strings.ContainsAny(host, " /\\@?#") {
		return fmt.Errorf("%s %q has no usable host", what, addr)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%s %q: port must be 1..65535", what, addr)
	}
	return nil
}
