package httpfence

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/termfence/termfence/internal/testwait"
)

// Unit tests of leanTransport on its own (the proxy-level ones are in
// transport_test.go). The goleak check of TestMain covers them.

// leanEnv is a backend that answers each request with a body of
// X-Size bytes (default 64 KiB) and names the client address it came from,
// so that a test sees which connection carried it.
func leanEnv(t *testing.T) (*leanTransport, string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Remote", r.RemoteAddr)
		size := 64 << 10
		if r.Header.Get("X-Size") == "0" {
			size = 0
		}
		w.Header().Set("Content-Length", strconv.Itoa(size))
		if r.Header.Get("X-Hang") != "" {
			// Part of the body, then nothing until the client goes away.
			io.WriteString(w, strings.Repeat("b", 100))
			http.NewResponseController(w).Flush()
			select {
			case <-r.Context().Done():
			case <-time.After(testwait.Bound(10 * time.Second)):
			}
			return
		}
		if r.Method != http.MethodHead {
			io.WriteString(w, strings.Repeat("b", size))
		}
	}))
	t.Cleanup(srv.Close)
	target, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	tr := newLeanTransport(target, newHTTPTransport())
	t.Cleanup(tr.CloseIdleConnections)
	return tr, srv.URL
}

// leanDo sends method to u with ctx and returns the response, failing the
// test on an error.
func leanDo(t *testing.T, tr *leanTransport, ctx context.Context, method, u string, kv ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return string(b)
}

func (t *leanTransport) idleCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.idle)
}

func TestLeanTransportReuse(t *testing.T) {
	tr, u := leanEnv(t)
	ctx := context.Background()
	r1 := leanDo(t, tr, ctx, "GET", u)
	if b := readAll(t, r1); len(b) != 64<<10 {
		t.Fatalf("body: %d bytes", len(b))
	}
	if n := tr.idleCount(); n != 1 {
		t.Fatalf("idle after a body read to its end: %d, want 1", n)
	}
	r2 := leanDo(t, tr, ctx, "GET", u)
	readAll(t, r2)
	if r1.Header.Get("X-Remote") != r2.Header.Get("X-Remote") {
		t.Fatal("a connection whose body was read to the end was not reused")
	}
	// HEAD and an empty body: no body to read, the connection is free at
	// once, before the caller closes anything.
	r3 := leanDo(t, tr, ctx, "HEAD", u)
	r4 := leanDo(t, tr, ctx, "GET", u, "X-Size", "0")
	if r3.Body != http.NoBody || r4.Body != http.NoBody {
		t.Fatalf("bodies %T %T, want http.NoBody", r3.Body, r4.Body)
	}
	if r3.Header.Get("X-Remote") != r1.Header.Get("X-Remote") || r4.Header.Get("X-Remote") != r1.Header.Get("X-Remote") {
		t.Fatal("HEAD and empty responses did not free their connection")
	}
}

// TestLeanTransportEarlyClose: a body closed before its end closes its
// connection; the next request gets a new one and a whole answer.
func TestLeanTransportEarlyClose(t *testing.T) {
	tr, u := leanEnv(t)
	ctx := context.Background()
	r1 := leanDo(t, tr, ctx, "GET", u)
	if _, err := io.ReadFull(r1.Body, make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	r1.Body.Close()
	if _, err := r1.Body.Read(make([]byte, 1)); !errors.Is(err, errLeanBodyClosed) {
		t.Fatalf("read after Close: %v", err)
	}
	if n := tr.idleCount(); n != 0 {
		t.Fatalf("idle after an early Close: %d, want 0", n)
	}
	r2 := leanDo(t, tr, ctx, "GET", u)
	if b := readAll(t, r2); len(b) != 64<<10 || strings.Trim(b, "b") != "" {
		t.Fatalf("next body: %d bytes", len(b))
	}
	if r1.Header.Get("X-Remote") == r2.Header.Get("X-Remote") {
		t.Fatal("a connection with an unread body left was reused")
	}
}

// TestLeanTransportCancelMidBody: cancelling the request's context fails
// the body read at once with the context's error and closes the connection.
func TestLeanTransportCancelMidBody(t *testing.T) {
	tr, u := leanEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	r1 := leanDo(t, tr, ctx, "GET", u, "X-Hang", "1")
	if _, err := io.ReadFull(r1.Body, make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	// The backend sends nothing more: the read blocks until the cancel
	// sets a past deadline on the connection.
	cancel()
	_, err := io.Copy(io.Discard, r1.Body)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("body read after cancel: %v, want context.Canceled", err)
	}
	r1.Body.Close()
	r2 := leanDo(t, tr, context.Background(), "GET", u)
	readAll(t, r2)
	if r1.Header.Get("X-Remote") == r2.Header.Get("X-Remote") {
		t.Fatal("a cancelled connection was reused")
	}
	// A request whose context is already done is not sent.
	req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
	if _, err := tr.RoundTrip(req); !errors.Is(err, context.Canceled) {
		t.Fatalf("request with a done context: %v", err)
	}
}

// TestLeanTransportPoolLimits: connections idle longer than the idle
// timeout are closed instead of reused; no more than maxIdle are kept.
func TestLeanTransportPoolLimits(t *testing.T) {
	tr, u := leanEnv(t)
	ctx := context.Background()
	tr.idleTimeout = 1 // nanosecond: every idle connection has expired when next looked at
	r1 := leanDo(t, tr, ctx, "GET", u)
	readAll(t, r1)
	r2 := leanDo(t, tr, ctx, "GET", u)
	readAll(t, r2)
	if r1.Header.Get("X-Remote") == r2.Header.Get("X-Remote") {
		t.Fatal("an expired idle connection was reused")
	}
	// Two connections out at once; as the second comes back, the first
	// (idle longer than the timeout) is closed rather than kept below it.
	ra, rb := leanDo(t, tr, ctx, "GET", u), leanDo(t, tr, ctx, "GET", u)
	readAll(t, ra)
	readAll(t, rb)
	if n := tr.idleCount(); n != 1 {
		t.Fatalf("idle after two returns with a 1 ns idle timeout: %d, want 1", n)
	}
	tr.idleTimeout = 0
	tr.maxIdle = 2
	var open []*http.Response
	for range 4 {
		open = append(open, leanDo(t, tr, ctx, "GET", u))
	}
	for _, r := range open {
		readAll(t, r)
	}
	if n := tr.idleCount(); n != 2 {
		t.Fatalf("idle: %d, want maxIdle 2", n)
	}
	tr.CloseIdleConnections()
	if n := tr.idleCount(); n != 0 {
		t.Fatalf("idle after CloseIdleConnections: %d", n)
	}
}

// TestLeanTransportHandles: what the lean transport sends itself and what
// it leaves to the fallback.
func TestLeanTransportHandles(t *testing.T) {
	target, _ := url.Parse("http://backend:8080/base")
	tr := newLeanTransport(target, newHTTPTransport())
	if tr.addr != "backend:8080" {
		t.Fatalf("addr %q", tr.addr)
	}
	if a := newLeanTransport(&url.URL{Scheme: "http", Host: "[::1]"}, newHTTPTransport()).addr; a != "[::1]:80" {
		t.Fatalf("default port: addr %q", a)
	}
	mk := func(method, u string, body io.Reader, size int64, kv ...string) *http.Request {
		r, err := http.NewRequest(method, u, body)
		if err != nil {
			t.Fatal(err)
		}
		if body != nil {
			r.Body = io.NopCloser(body) // not a known in-memory reader
			r.ContentLength = size
		}
		for i := 0; i+1 < len(kv); i += 2 {
			r.Header.Set(kv[i], kv[i+1])
		}
		return r
	}
	small := strings.NewReader(strings.Repeat("x", 100))
	withTrailer := mk("POST", "http://backend:8080/", small, 100)
	withTrailer.Trailer = http.Header{"X-T": nil}
	cases := []struct {
		name string
		req  *http.Request
		want bool
	}{
		{"GET", mk("GET", "http://backend:8080/x", nil, 0), true},
		{"POST small body", mk("POST", "http://backend:8080/", small, 100), true},
		{"POST body at the limit", mk("POST", "http://backend:8080/", small, leanMaxBody), true},
		{"POST body over the limit", mk("POST", "http://backend:8080/", small, leanMaxBody+1), false},
		{"POST body of unknown length", mk("POST", "http://backend:8080/", small, -1), false},
		{"https", mk("GET", "https://backend:8080/", nil, 0), false},
		{"another host", mk("GET", "http://other:8080/", nil, 0), false},
		{"upgrade", mk("GET", "http://backend:8080/", nil, 0, "Connection", "Upgrade", "Upgrade", "websocket"), false},
		{"expect", mk("POST", "http://backend:8080/", small, 100, "Expect", "100-continue"), false},
		{"CONNECT", mk("CONNECT", "http://backend:8080/", nil, 0), false},
		{"trailers", withTrailer, false},
	}
	for _, c := range cases {
		if got := tr.handles(c.req); got != c.want {
			t.Errorf("%s: handles = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestReplayable(t *testing.T) {
	body := io.NopCloser(strings.NewReader("x"))
	cases := []struct {
		method string
		body   io.ReadCloser
		key    string
		want   bool
	}{
		{"GET", nil, "", true},
		{"HEAD", nil, "", true},
		{"OPTIONS", nil, "", true},
		{"TRACE", nil, "", true},
		{"GET", body, "", false},
		{"POST", nil, "", false},
		{"PUT", nil, "", false},
		{"DELETE", nil, "", false},
		{"POST", nil, "Idempotency-Key", true},
		{"POST", nil, "X-Idempotency-Key", true},
		{"POST", body, "Idempotency-Key", false},
	}
	// A body is never replayed, even one that GetBody could rewind.
	withGetBody, _ := http.NewRequest("GET", "http://backend/", strings.NewReader("x"))
	if withGetBody.GetBody == nil || replayable(withGetBody) {
		t.Error("a GET with a rewindable body is replayable")
	}
	for _, c := range cases {
		req := &http.Request{Method: c.method, Body: c.body, Header: http.Header{}}
		if c.key != "" {
			req.Header[c.key] = []string{"k1"}
		}
		if got := replayable(req); got != c.want {
			t.Errorf("%s body=%v key=%q: %v, want %v", c.method, c.body != nil, c.key, got, c.want)
		}
	}
}
