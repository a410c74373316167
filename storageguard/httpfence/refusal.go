package httpfence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// Refusal is the JSON body of every response the proxy or Middleware
// generates itself instead of forwarding: a refused token or epoch, a bad
// request, or a backend failure.
type Refusal struct {
	// Code is a stable, machine-readable reason: stale_epoch,
	// conflicting_epoch, foreign_cluster, missing_token, malformed_token,
	// unsigned_token, bad_signature, unauthenticated, bad_resource,
	// misconfigured, fence_closed, fence_lost, fence_unavailable, canceled,
	// backend_error, backend_timeout.
	Code string `json:"code"`
	// Error is the error's text, for people.
	Error string `json:"error"`
	// Resource is the resource the request mapped to, in the refusal of a
	// stale or conflicting epoch (an authentic token); empty otherwise, so
	// that a request with no valid token learns no internal name.
	Resource string `json:"resource,omitempty"`
	// Presented is the epoch the request's token carried, when the token
	// was authentic.
	Presented *epoch.Epoch `json:"presented,omitempty"`
	// Highest is the highest epoch the fence had accepted for Resource when
	// a stale or conflicting epoch was refused. No other refusal reads the
	// fence.
	Highest *epoch.Epoch `json:"highest,omitempty"`
}

// HTTPStatus returns the HTTP status code and Refusal code for an error from
// a storageguard.Guard or a fence:
//
//   - 409 Conflict: storageguard.ErrStale, ErrConflict (the epoch lost to a
//     newer or conflicting one; retrying with the same token cannot
//     succeed);
//   - 401 Unauthorized: a missing, malformed or unsigned token;
//   - 403 Forbidden: a badly signed (forged) token, or one of another
//     cluster;
//   - 400 Bad Request: a bad resource name;
//   - 500: storageguard.ErrNoFence, ErrBadConfig (checked first);
//   - 503: a closed or failing fence, a fence lost during the write
//     (storageguard.ErrFenceLost: the write's outcome is unknown), a
//     cancelled request.
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
	case errors.Is(err, storageguard.ErrFenceLost):
		return http.StatusServiceUnavailable, "fence_lost"
	case errors.Is(err, storageguard.ErrClosed):
		return http.StatusServiceUnavailable, "fence_closed"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, "canceled"
	}
	return http.StatusServiceUnavailable, "fence_unavailable"
}

// TokenFrom returns the request's one Fencing-Token header value. A missing
// or empty header is refused with storageguard.ErrUnauthenticated; several
// headers (or values), or one over epoch.MaxTokenLen bytes, with
// epoch.ErrMalformed: a proxy and a backend could otherwise read different
// ones.
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

// refuse writes the JSON Refusal for err. It never reads the fence: a
// request refused before its token was verified (missing, malformed,
// unsigned, forged, or of another cluster) learns nothing about the
// resource, neither its name (by default the backend's URL) nor its highest
// epoch; a stale or conflicting epoch's refusal names both epochs, which the
// error carries, and the resource.
func refuse(w http.ResponseWriter, resource string, err error) {
	status, body := RefusalFor(resource, err)
	if body.Highest == nil {
		// Only the fence's own refusals (stale, conflicting) name the
		// resource: their token was authentic.
		body.Resource = ""
		var fe *storageguard.ForeignError
		if errors.As(err, &fe) {
			body.Error = fmt.Sprintf("%v: presented %s", storageguard.ErrForeignCluster, fe.Presented)
		}
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", epoch.Header)
	}
	writeJSON(w, status, body)
}

// RefusalFor returns the HTTP status (see HTTPStatus) and the JSON body that
// the proxy and Middleware answer for err, a refusal or failure from a
// storageguard.Guard or a fence, with the presented and highest epochs
// filled in when err carries them (*storageguard.StaleError, ConflictError,
// ForeignError). Servers that call Guard.Do or a Fence themselves use it to
// answer exactly as the proxy does.
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
	setJSONHeader(w)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// writeJSONBytes writes an encoded Refusal, b.
func writeJSONBytes(w http.ResponseWriter, status int, b []byte) {
	setJSONHeader(w)
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func setJSONHeader(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
}

// validResource returns resource if it is a valid name, else "" (a refusal
// does not echo a bad name back).
func validResource(resource string) string {
	if storageguard.ValidateResource(resource) != nil {
		return ""
	}
	return resource
}
