package httpfence_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/fencetest"
	"github.com/termfence/termfence/storageguard/httpfence"
)

// mwEnv is a handler behind Middleware, served over loopback.
type mwEnv struct {
	codec  epoch.Codec
	spy    *fencetest.Spy
	guard  *storageguard.Guard
	server *httptest.Server
	client *http.Client
}

func newMwEnv(t *testing.T, h http.Handler, resource func(*http.Request) string) *mwEnv {
	t.Helper()
	return newMwEnvOver(t, nil, h, resource)
}

// newMwEnvOver is newMwEnv with the Guard over fence (nil: a Memory fence).
func newMwEnvOver(t *testing.T, fence storageguard.Fence, h http.Handler, resource func(*http.Request) string) *mwEnv {
	t.Helper()
	e := &mwEnv{codec: gtCodec(t, gtKey), spy: gtSpy()}
	if fence != nil {
		e.spy.Fence = fence
	}
	e.guard = storageguard.NewGuard(e.spy, storageguard.GuardConfig{Cluster: "payments", Verifier: e.codec})
	e.server = httptest.NewServer(httpfence.Middleware(e.guard, resource)(h))
	t.Cleanup(e.server.Close)
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	e.client = &http.Client{Transport: tr}
	return e
}

func (e *mwEnv) send(path string, tokens []string, kv ...string) pxResult {
	req, err := tokenRequest(context.Background(), "POST", e.server.URL+path, tokens, []byte("payload"), kv...)
	if err != nil {
		return pxResult{err: err}
	}
	return doRequest(e.client, req)
}

func (e *mwEnv) token(t testing.TB, term uint64, leader string) []string {
	return []string{gtSign(t, e.codec, gtEp(term, leader))}
}

func TestMiddlewareFencesHandler(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]epoch.Epoch{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ep, ok := httpfence.EpochFrom(r.Context())
		if !ok {
			t.Error("handler ran without an epoch in its context")
		}
		mu.Lock()
		seen[r.Header.Get("X-Req")] = ep
		mu.Unlock()
		io.WriteString(w, "stored under "+ep.String())
	})
	e := newMwEnv(t, h, nil)
	if r := e.send("/", e.token(t, 34, "node-b"), "X-Req", "b"); r.status != 200 || r.body != "stored under payments/34/node-b" {
		t.Fatalf("leader 34: %+v", r)
	}
	if h, _ := e.guard.Highest(context.Background(), httpfence.DefaultMiddlewareResource); h != gtEp(34, "node-b") {
		t.Fatalf("default resource highest = %v", h)
	}
	other := gtCodec(t, []byte("a different key that nobody shares!!"))
	cases := []struct {
		name   string
		tokens []string
		status int
		code   string
	}{
		{"stale", e.token(t, 33, "node-a"), 409, "stale_epoch"},
		{"conflict", e.token(t, 34, "node-c"), 409, "conflicting_epoch"},
		{"missing", nil, 401, "missing_token"},
		{"duplicate", append(e.token(t, 35, "node-d"), e.token(t, 35, "node-d")...), 401, "malformed_token"},
		{"garbage", []string{"not/a/token/at/all"}, 401, "malformed_token"},
		{"forged", []string{gtSign(t, other, gtEp(epoch.MaxTerm, "mallory"))}, 403, "bad_signature"},
		{"foreign", []string{gtSign(t, e.codec, epoch.Epoch{Cluster: "billing", Term: 99, Leader: "x"})}, 403, "foreign_cluster"},
	}
	for _, c := range cases {
		r := e.send("/", c.tokens, "X-Req", c.name)
		if r.status != c.status || r.refusal.Code != c.code {
			t.Errorf("%s: %d %q, want %d %q (%+v)", c.name, r.status, r.refusal.Code, c.status, c.code, r.refusal)
		}
		fenceRefused := c.status == 409 // the token verified; the fence refused the epoch
		if named := r.refusal.Highest != nil && *r.refusal.Highest == gtEp(34, "node-b"); named != fenceRefused {
			t.Errorf("%s: refusal names the highest epoch: %v, want %v (%+v)", c.name, named, fenceRefused, r.refusal)
		}
		if named := r.refusal.Resource != "" || strings.Contains(r.refusal.Error, httpfence.DefaultMiddlewareResource); named != fenceRefused {
			t.Errorf("%s: refusal names the resource: %v, want %v (%+v)", c.name, named, fenceRefused, r.refusal)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 {
		t.Fatalf("refused requests reached the handler: %v", seen)
	}
	if _, ok := httpfence.EpochFrom(context.Background()); ok {
		t.Fatal("EpochFrom found an epoch in a bare context")
	}
}

// TestMiddlewareOlderHandlerFinishesFirst: a handler running under epoch 33
// holds epoch 34's handler back until it returns.
func TestMiddlewareOlderHandlerFinishesFirst(t *testing.T) {
	oldIn := make(chan struct{})
	releaseOld := make(chan struct{})
	newIn := make(chan struct{})
	var order []string
	var mu sync.Mutex
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ep, _ := httpfence.EpochFrom(r.Context())
		switch ep.Term {
		case 33:
			close(oldIn)
			select {
			case <-releaseOld:
			case <-time.After(waitLimit):
			}
			mu.Lock()
			order = append(order, "33 done")
			mu.Unlock()
		case 34:
			mu.Lock()
			order = append(order, "34 in")
			mu.Unlock()
			close(newIn)
		}
	})
	e := newMwEnv(t, h, func(r *http.Request) string { return "ledger" })
	var once sync.Once
	release := func() { once.Do(func() { close(releaseOld) }) }
	t.Cleanup(release)
	atFence := make(chan struct{})
	var atOnce sync.Once
	e.spy.OnDecide = func(ep epoch.Epoch) {
		if ep.Term == 34 {
			atOnce.Do(func() { close(atFence) })
		}
	}
	oldRes := async(func() pxResult { return e.send("/", e.token(t, 33, "node-a")) })
	recv(t, oldIn, "the old handler")
	newRes := async(func() pxResult { return e.send("/", e.token(t, 34, "node-b")) })
	recv(t, atFence, "the new request at the fence")
	select {
	case <-newIn:
		t.Fatal("the epoch-34 handler ran while the epoch-33 handler was running")
	case <-time.After(100 * time.Millisecond):
	}
	release()
	if r := recv(t, oldRes, "the old response"); r.status != 200 {
		t.Fatalf("old: %+v", r)
	}
	if r := recv(t, newRes, "the new response"); r.status != 200 {
		t.Fatalf("new: %+v", r)
	}
	mu.Lock()
	got := strings.Join(order, ", ")
	mu.Unlock()
	if got != "33 done, 34 in" {
		t.Fatalf("order: %s", got)
	}
	if r := e.send("/", e.token(t, 33, "node-a")); r.status != http.StatusConflict {
		t.Fatalf("33 after 34: %+v", r)
	}
}

// TestMiddlewarePanicReleasesFence: a handler that panics does not leave the
// fence held; the panic reaches the caller after the fence was released.
func TestMiddlewarePanicReleasesFence(t *testing.T) {
	codec := gtCodec(t, gtKey)
	g := storageguard.NewGuard(storageguard.NewMemory(), storageguard.GuardConfig{Verifier: codec})
	h := httpfence.Middleware(g, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Panic") != "" {
			panic("boom")
		}
		io.WriteString(w, "ok")
	}))
	serve := func(term uint64, panics bool) (code int, recovered any) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "/", nil)
		req.Header.Set(epoch.Header, gtSign(t, codec, gtEp(term, "node-"+string(rune('a'+term)))))
		if panics {
			req.Header.Set("X-Panic", "1")
		}
		defer func() {
			recovered = recover()
			code = rec.Code
		}()
		h.ServeHTTP(rec, req)
		return rec.Code, nil
	}
	if _, p := serve(1, true); p != "boom" {
		t.Fatalf("recovered %v, want the handler's panic", p)
	}
	// A raise waits for every older write; it returns only if the panicking
	// handler's write was released.
	done := make(chan int, 1)
	go func() { c, _ := serve(2, false); done <- c }()
	if c := recv(t, done, "a newer epoch after a panic"); c != 200 {
		t.Fatalf("newer epoch after a panic: %d", c)
	}
	if c, _ := serve(1, false); c != http.StatusConflict {
		t.Fatalf("older epoch after a raise: %d", c)
	}
}

func TestMiddlewareBadInput(t *testing.T) {
	ran := false
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran = true })
	codec := gtCodec(t, gtKey)
	tok := gtSign(t, codec, gtEp(1, "node-a"))
	g := storageguard.NewGuard(storageguard.NewMemory(), storageguard.GuardConfig{Verifier: codec})
	handlers := map[string]struct {
		h    http.Handler
		code int
	}{
		"nil guard":      {httpfence.Middleware(nil, nil)(h), 500},
		"nil fence":      {httpfence.Middleware(storageguard.NewGuard(nil, storageguard.GuardConfig{Verifier: codec}), nil)(h), 500},
		"empty resource": {httpfence.Middleware(g, func(*http.Request) string { return "" })(h), 400},
		"huge resource":  {httpfence.Middleware(g, func(*http.Request) string { return strings.Repeat("r", 2000) })(h), 400},
	}
	for name, c := range handlers {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "/", nil)
		req.Header.Set(epoch.Header, tok)
		c.h.ServeHTTP(rec, req)
		var body httpfence.Refusal
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != c.code {
			t.Errorf("%s: %d %s (%v), want %d", name, rec.Code, rec.Body, err, c.code)
		}
		if body.Resource != "" {
			t.Errorf("%s: refusal echoes resource %q", name, body.Resource)
		}
	}
	if ran {
		t.Fatal("handler ran on bad input")
	}
}

// BenchmarkMiddleware measures, in one run, what Middleware adds to a
// handler: the same request served by the bare handler and by the handler
// behind Middleware (HMAC token, Memory fence, one epoch), in process,
// without the network, so that only the middleware's own work differs:
// reading and verifying the token, the fence's Do, and the request copy that
// carries the epoch in its context. ns/op and allocs/op of the two
// sub-benchmarks side by side are the figures; "parallel" runs the same on
// every core, all requests writing one resource.
//
//	go test -run '^$' -bench Middleware -benchmem ./storageguard/
func BenchmarkMiddleware(b *testing.B) {
	codec := gtCodec(b, gtKey)
	g := storageguard.NewGuard(storageguard.NewMemory(), storageguard.GuardConfig{Cluster: "payments", Verifier: codec})
	tok := gtSign(b, codec, gtEp(34, "node-b"))
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	for _, c := range []struct {
		name string
		h    http.Handler
	}{
		{"bare", handler},
		{"middleware", httpfence.Middleware(g, nil)(handler)},
	} {
		req := httptest.NewRequest("POST", "/orders", nil)
		req.Header.Set(epoch.Header, tok)
		b.Run(c.name, func(b *testing.B) {
			w := &statusWriter{header: http.Header{}}
			b.ReportAllocs()
			for range b.N {
				w.status = 0
				c.h.ServeHTTP(w, req)
				if w.status != http.StatusOK {
					b.Fatalf("status %d", w.status)
				}
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				w := &statusWriter{header: http.Header{}}
				for pb.Next() {
					w.status = 0
					c.h.ServeHTTP(w, req)
					if w.status != http.StatusOK {
						b.Errorf("status %d", w.status)
						return
					}
				}
			})
		})
	}
}

// statusWriter is a ResponseWriter that keeps only the status, so that a
// benchmark measures the handler rather than a recorder.
type statusWriter struct {
	header http.Header
	status int
}

func (w *statusWriter) Header() http.Header { return w.header }

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *statusWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return len(p), nil
}
