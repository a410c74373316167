package httpfence

import (
	"context"
	"errors"
	"net/http"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// epochKey is the context key of the admitted epoch.
type epochKey struct{}

func withEpoch(ctx context.Context, ep epoch.Epoch) context.Context {
	return context.WithValue(ctx, epochKey{}, ep)
}

// EpochFrom returns the epoch under which the request with context ctx was
// admitted by Middleware (or forwarded by a proxy), and whether there is one.
func EpochFrom(ctx context.Context) (epoch.Epoch, bool) {
	ep, ok := ctx.Value(epochKey{}).(epoch.Epoch)
	return ep, ok
}

// DefaultMiddlewareResource is the resource every request maps to when
// Middleware is given a nil resource func.
const DefaultMiddlewareResource = "default"

// errHandlerPanicked is what the write returns when the handler panicked.
var errHandlerPanicked = errors.New("httpfence: handler panicked")

// Middleware fences a Go handler that owns its storage: each request must
// carry exactly one token in the Fencing-Token header; the storageguard.Guard verifies it
// and the handler runs inside storageguard.Guard.Do for the request's resource (resource;
// nil maps every request to DefaultMiddlewareResource). So the handler runs
// only under an admitted epoch, handlers under the same epoch run
// concurrently, and a newer epoch is admitted only after every handler
// running under an older one has returned. The handler finds the admitted
// epoch with EpochFrom(r.Context()); the request's context is the one the
// fence's Do gave the write.
//
// Requests that are refused never reach the handler; they get the JSON
// Refusal and status of HTTPStatus, as with NewProxy. Every request needs a
// token, reads too: route unfenced reads around the middleware.
//
// The handler must not call the same fence for the same resource (a raise
// waiting for the handler would wait for itself), and should bound its own
// running time: a newer leader's requests wait for it. A panic in the handler
// is re-raised after the fence has been released. Middleware never panics on
// a nil storageguard.Guard: every request is then refused with 500.
func Middleware(g *storageguard.Guard, resource func(*http.Request) string) func(http.Handler) http.Handler {
	if resource == nil {
		resource = func(*http.Request) string { return DefaultMiddlewareResource }
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := g.Err(); err != nil {
				refuse(w, r, g, "", err)
				return
			}
			token, err := TokenFrom(r)
			res := resource(r)
			if err == nil {
				err = storageguard.ValidateResource(res)
			}
			if err != nil {
				refuse(w, r, g, validResource(res), err)
				return
			}
			var ran bool
			var panicked any
			err = g.Do(r.Context(), res, token, func(ctx context.Context, ep epoch.Epoch) error {
				ran = true
				func() {
					defer func() { panicked = recover() }()
					next.ServeHTTP(w, r.WithContext(withEpoch(ctx, ep)))
				}()
				if panicked != nil {
					return errHandlerPanicked
				}
				return nil
			})
			if panicked != nil {
				panic(panicked)
			}
			if !ran {
				refuse(w, r, g, res, err)
			}
		})
	}
}
