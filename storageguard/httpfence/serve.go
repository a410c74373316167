package httpfence

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// fenced is the one serving path of NewProxy's handler and of Middleware. It
// reads the request's token and resource, lets the Guard verify the token,
// and serves the request from inside the Guard's Do for that resource: the
// request is served only under an admitted epoch, and no newer epoch is
// admitted for the resource until it has been served. Every request it does
// not serve gets the JSON Refusal (refuse).
type fenced struct {
	guard *storageguard.Guard
	// resource maps a request to the resource it writes.
	resource func(*http.Request) string
	// err, if set, refuses every request with it: a handler built from a
	// Guard or a config that cannot work (500).
	err error
	// serve serves an admitted request. ctx is the fence's write context
	// with the admission (EpochFrom) in it; r is the request as received.
	serve func(ctx context.Context, w http.ResponseWriter, r *http.Request)
	// unfenced, if set, reports whether a request that carries no token at
	// all is served without the fence (by serve, with r's own context, and
	// no admission in it) instead of being refused.
	unfenced func(r *http.Request) bool
	// canonical, if set, gives a request's path one spelling before it is
	// mapped to a resource and served, or refuses it (the proxy's).
	canonical func(*http.Request) (*http.Request, error)
	// startup, if set, holds back newer epochs after a restart (the
	// proxy's, see startup).
	startup *startup
	// errorLog receives what cannot be told to the client: a fence lost
	// while the request was served (its response was already sent). Nil:
	// the log package's standard logger.
	errorLog *log.Logger
}

var _ http.Handler = (*fenced)(nil)

// errPanicked is what the write returns to the fence when serve panicked;
// the panic itself is re-raised once the fence has returned.
var errPanicked = errors.New("httpfence: serving the request panicked")

func (h *fenced) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.err != nil {
		refuse(w, "", h.err)
		return
	}
	token, err := TokenFrom(r)
	if h.unfenced != nil && errors.Is(err, errNoToken) && h.unfenced(r) {
		h.serve(r.Context(), w, r)
		drainBody(r)
		return
	}
	if err == nil && h.canonical != nil {
		var c *http.Request
		if c, err = h.canonical(r); err == nil {
			r = c
		}
	}
	if err != nil {
		refuse(w, "", err)
		return
	}
	resource := h.resource(r)
	if err := storageguard.ValidateResource(resource); err != nil {
		refuse(w, validResource(resource), err)
		return
	}
	first := h.startup.sight(r.Context(), resource)
	var ran bool
	var panicked any
	err = h.guard.Do(r.Context(), resource, token, func(ctx context.Context, ep epoch.Epoch) error {
		ran = true
		if err := h.startup.wait(ctx, first, ep); err != nil {
			// Nothing was forwarded; the client is gone.
			return nil
		}
		if panicked = serveRecovered(withAdmission(ctx, ep, resource), h.serve, w, r); panicked != nil {
			return errPanicked
		}
		return nil
	})
	if panicked != nil {
		// Only now, with the fence released: a raise waiting for this
		// write must not wait for whoever recovers the panic.
		panic(panicked)
	}
	if !ran {
		refuse(w, resource, err)
		return
	}
	if errors.Is(err, storageguard.ErrFenceLost) {
		// The response is already written: the operator must hear of it.
		msg := fmt.Sprintf("httpfence: %s %s for resource %q was served without a guaranteed fence: %v", r.Method, r.URL.Path, resource, err)
		if h.errorLog != nil {
			h.errorLog.Print(msg)
		} else {
			log.Print(msg)
		}
	}
	// The response, or the backend's failure, is already written.
	drainBody(r)
}

// drainBody closes (and so drains, up to a limit) the body of a request
// that was served, once the fence is released. A handler in full duplex
// (the proxy's) may leave it unread, for instance when the backend could
// not be reached; net/http's HTTP/1 server would then drain it only after
// it stopped watching the connection, and panic when it reads the next
// request (golang/go#68560). Drained here, inside the handler, the body
// leaves the connection usable.
func drainBody(r *http.Request) {
	if r.Body != nil {
		_ = r.Body.Close()
	}
}

// serveRecovered calls serve and returns what it panicked with, if it did
// (for the proxy, http.ErrAbortHandler when a response was cut off
// mid-copy).
func serveRecovered(ctx context.Context, serve func(context.Context, http.ResponseWriter, *http.Request), w http.ResponseWriter, r *http.Request) (panicked any) {
	defer func() { panicked = recover() }()
	serve(ctx, w, r)
	return nil
}

// admission is what an admitted request's context carries.
type admission struct {
	ep       epoch.Epoch
	resource string
}

// admissionKey is the context key of an admission.
type admissionKey struct{}

func withAdmission(ctx context.Context, ep epoch.Epoch, resource string) context.Context {
	return context.WithValue(ctx, admissionKey{}, admission{ep: ep, resource: resource})
}

func admissionFrom(ctx context.Context) (admission, bool) {
	a, ok := ctx.Value(admissionKey{}).(admission)
	return a, ok
}

// EpochFrom returns the epoch under which the request with context ctx was
// admitted by Middleware (or forwarded by a proxy), and whether there is one.
func EpochFrom(ctx context.Context) (epoch.Epoch, bool) {
	a, ok := admissionFrom(ctx)
	return a.ep, ok
}
