package httpfence

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/termfence/termfence/storageguard"
)

// errBadPath refuses (400, bad_resource) a request whose path the proxy
// cannot map to one spelling: a percent-encoded '/', '\', '.' or '%'
// (which a backend may or may not decode into a segment boundary), a '\',
// or a ".." above the root.
var errBadPath = fmt.Errorf("%w: httpfence: request path has no canonical form", storageguard.ErrBadResource)

// canonicalPath gives r (a proxied request) one spelling of its path
// before the path is mapped to a resource and forwarded, so that the
// resource the fence decides on is the one the backend is asked to write:
// empty segments ("//"), "." segments and a trailing "/" are dropped, and
// ".." removes the segment before it. Paths it cannot map to one spelling
// are refused (errBadPath). The backend receives the canonical path.
func canonicalPath(r *http.Request) (*http.Request, error) {
	p := r.URL.Path
	if r.URL.RawPath != "" {
		// Set only when the escaped path is not the default encoding of
		// Path: an encoded '/' (%2F) among others, which a backend may
		// decode into a segment boundary or not.
		ep := strings.ToLower(r.URL.RawPath)
		if strings.Contains(ep, "%2f") || strings.Contains(ep, "%2e") || strings.Contains(ep, "%25") || strings.Contains(ep, "%5c") {
			return nil, errBadPath
		}
	}
	if strings.ContainsAny(p, "\\%") {
		// A '\\' some backends read as '/'; a '%' left after decoding
		// (an encoded "%2F", say) another layer may decode again.
		return nil, errBadPath
	}
	if r.URL.RawPath == "" && isClean(p) {
		return r, nil
	}
	c, ok := cleanPath(p)
	if !ok {
		return nil, errBadPath
	}
	r2 := new(http.Request)
	*r2 = *r
	u := *r.URL
	u.Path, u.RawPath = c, ""
	r2.URL = &u
	return r2, nil
}

// isClean reports, without allocating, whether cleanPath would return p.
func isClean(p string) bool {
	if p == "" || p == "/" {
		return true
	}
	if p[0] != '/' || p[len(p)-1] == '/' {
		return false
	}
	return !strings.Contains(p, "//") && !strings.Contains(p, "/./") && !strings.Contains(p, "/../") &&
		!strings.HasSuffix(p, "/.") && !strings.HasSuffix(p, "/..")
}

// cleanPath returns p with empty and "." segments and a trailing "/"
// dropped and ".." resolved; false if ".." would climb above the root. An
// empty path stays empty (the target's own path).
func cleanPath(p string) (string, bool) {
	if p == "" {
		return "", true
	}
	var out []string
	for seg := range strings.SplitSeq(p, "/") {
		switch seg {
		case "", ".":
		case "..":
			if len(out) == 0 {
				return "", false
			}
			out = out[:len(out)-1]
		default:
			out = append(out, seg)
		}
	}
	return "/" + strings.Join(out, "/"), true
}
