package httpfence

import (
	"context"
	"net/http"

	"github.com/termfence/termfence/storageguard"
)

// DefaultMiddlewareResource is the resource every request maps to when
// Middleware is given a nil resource func.
const DefaultMiddlewareResource = "default"

// Middleware fences a Go handler that owns its storage: each request must
// carry exactly one token in the Fencing-Token header; g verifies it and the
// handler runs inside g.Do for the request's resource (resource; nil maps
// every request to DefaultMiddlewareResource). So the handler runs only
// under an admitted epoch, handlers under the same epoch run concurrently,
// and a newer epoch is admitted only after every handler running under an
// older one has returned. The handler finds the admitted epoch with
// EpochFrom(r.Context()); the request's context is the one the fence's Do
// gave the write, without its cancellation: it is not cancelled when the
// client goes away (HTTP/1.1 close, HTTP/2 stream reset), so that storage
// calls the handler makes with it are not abandoned half-way, which would
// end the hold while the storage may still act on them. The hold lasts
// until the handler returns.
//
// Requests that are refused never reach the handler; they get the JSON
// Refusal and status of HTTPStatus, as with NewProxy (the two share one
// serving path). Every request needs a token, reads too: route unfenced
// reads around the middleware.
//
// The handler must not call the same fence for the same resource (a raise
// waiting for the handler would wait for itself), and should bound its own
// running time (a context.WithTimeout of its own): a newer leader's
// requests wait for it, and a gone client does not cut it short. A panic in the
// handler is re-raised after the fence has been released. Middleware never
// panics on a Guard that cannot work (g.Err, a nil Guard included): every
// request is then refused with 500.
func Middleware(g *storageguard.Guard, resource func(*http.Request) string) func(http.Handler) http.Handler {
	if resource == nil {
		resource = func(*http.Request) string { return DefaultMiddlewareResource }
	}
	return func(next http.Handler) http.Handler {
		return &fenced{
			guard:    g,
			resource: resource,
			err:      g.Err(),
			serve: func(ctx context.Context, w http.ResponseWriter, r *http.Request) {
				// Not cancelled when the client goes away: a handler
				// would abandon its storage calls half-way and return,
				// ending the hold while the storage may still act on
				// them.
				next.ServeHTTP(w, r.WithContext(context.WithoutCancel(ctx)))
			},
		}
	}
}
