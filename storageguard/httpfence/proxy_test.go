package httpfence_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/fencetest"
	"github.com/termfence/termfence/storageguard/httpfence"
)

// waitLimit bounds every wait for something that must happen.
const waitLimit = 10 * time.Second

// pxEnv is a backend behind a fencing proxy, with a client.
type pxEnv struct {
	codec   epoch.Codec
	spy     *fencetest.Spy
	guard   *storageguard.Guard
	backend *httptest.Server
	proxy   *httptest.Server
	client  *http.Client
	// backendConns and backendClosed count the connections the backend
	// accepted and closed (newPxEnv only).
	backendConns, backendClosed *atomic.Int64
}

// newPxEnv starts backend and a proxy in front of it. A nil cfg.Transport
// leaves the proxy its own default transport (its idle connections hold no
// goroutine and are closed by the backend's Close); see pxConfig for an
// http.Transport.
func newPxEnv(t *testing.T, backend http.Handler, cfg httpfence.ProxyConfig) *pxEnv {
	t.Helper()
	return newPxEnvOver(t, nil, backend, cfg)
}

// newPxEnvOver is newPxEnv with the proxy's Guard over fence (nil: a
// Memory fence).
func newPxEnvOver(t testing.TB, fence storageguard.Fence, backend http.Handler, cfg httpfence.ProxyConfig) *pxEnv {
	t.Helper()
	srv := httptest.NewUnstartedServer(backend)
	conns, closed := new(atomic.Int64), new(atomic.Int64)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			conns.Add(1)
		case http.StateClosed:
			closed.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	e := newPxEnvToOver(t, fence, srv.URL, cfg)
	e.backend, e.backendConns, e.backendClosed = srv, conns, closed
	return e
}

// newPxEnvTo starts a proxy in front of the backend at backendURL.
func newPxEnvTo(t *testing.T, backendURL string, cfg httpfence.ProxyConfig) *pxEnv {
	t.Helper()
	return newPxEnvToOver(t, nil, backendURL, cfg)
}

func newPxEnvToOver(t testing.TB, fence storageguard.Fence, backendURL string, cfg httpfence.ProxyConfig) *pxEnv {
	t.Helper()
	e := &pxEnv{codec: gtCodec(t, gtKey), spy: gtSpy()}
	if fence != nil {
		e.spy.Fence = fence
	}
	e.guard = storageguard.NewGuard(e.spy, storageguard.GuardConfig{Cluster: "payments", Verifier: e.codec})
	if cfg.ErrorLog == nil {
		cfg.ErrorLog = log.New(io.Discard, "", 0)
	}
	target, err := url.Parse(backendURL)
	if err != nil {
		t.Fatal(err)
	}
	e.proxy = httptest.NewServer(waited(t, httpfence.NewProxy(e.guard, target, cfg)))
	t.Cleanup(e.proxy.Close)
	ctr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(ctr.CloseIdleConnections)
	e.client = &http.Client{Transport: ctr}
	return e
}

// eachTransport runs f with the proxy's default transport and with an
// http.Transport (what a caller may pass as ProxyConfig.Transport).
func eachTransport(t *testing.T, f func(t *testing.T, std bool)) {
	t.Run("default transport", func(t *testing.T) { f(t, false) })
	t.Run("http.Transport", func(t *testing.T) { f(t, true) })
}

// pxConfig returns cfg, if std with an http.Transport as its Transport, one
// the test closes, so that no connection outlives the test.
func pxConfig(t *testing.T, std bool, cfg httpfence.ProxyConfig) httpfence.ProxyConfig {
	if std {
		tr := &http.Transport{MaxIdleConnsPerHost: 64}
		t.Cleanup(tr.CloseIdleConnections)
		cfg.Transport = tr
	}
	return cfg
}

// pxResult is what a client got.
type pxResult struct {
	status  int
	header  http.Header
	body    string
	refusal httpfence.Refusal
	err     error // transport or body read error
}

// send sends method path with the given Fencing-Token values (none for a
// nil slice) and extra header pairs.
func (e *pxEnv) send(method, path string, tokens []string, kv ...string) pxResult {
	return e.sendCtx(context.Background(), method, path, tokens, kv...)
}

func (e *pxEnv) sendCtx(ctx context.Context, method, path string, tokens []string, kv ...string) pxResult {
	return e.sendBody(ctx, method, path, tokens, []byte("payload"), kv...)
}

// sendBody is sendCtx with the given body (none if nil).
func (e *pxEnv) sendBody(ctx context.Context, method, path string, tokens []string, body []byte, kv ...string) pxResult {
	req, err := tokenRequest(ctx, method, e.proxy.URL+path, tokens, body, kv...)
	if err != nil {
		return pxResult{err: err}
	}
	return doRequest(e.client, req)
}

// tokenRequest builds a request carrying each of tokens in its own
// Fencing-Token header, body (none if nil), and the header pairs kv.
func tokenRequest(ctx context.Context, method, url string, tokens []string, body []byte, kv ...string) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, err
	}
	for _, tok := range tokens {
		req.Header.Add(epoch.Header, tok)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	return req, nil
}

func doRequest(c *http.Client, req *http.Request) pxResult {
	resp, err := c.Do(req)
	if err != nil {
		return pxResult{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	r := pxResult{status: resp.StatusCode, header: resp.Header, body: string(b), err: err}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		_ = json.Unmarshal(b, &r.refusal)
	}
	return r
}

func (e *pxEnv) token(t testing.TB, term uint64, leader string) []string {
	return []string{gtSign(t, e.codec, gtEp(term, leader))}
}

// async runs f in a goroutine and returns its result on a channel.
func async(f func() pxResult) <-chan pxResult {
	ch := make(chan pxResult, 1)
	go func() { ch <- f() }()
	return ch
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// hitCounter is a backend that counts requests by their X-Req header.
type hitCounter struct {
	mu   sync.Mutex
	hits map[string]int
	tok  map[string]string // X-Req -> Fencing-Token the backend saw
}

func newHitCounter() *hitCounter {
	return &hitCounter{hits: map[string]int{}, tok: map[string]string{}}
}

func (h *hitCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("X-Req")
	h.mu.Lock()
	h.hits[id]++
	h.tok[id] = r.Header.Get(epoch.Header)
	h.mu.Unlock()
	io.Copy(io.Discard, r.Body)
	io.WriteString(w, "ok "+id)
}

func (h *hitCounter) count(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hits[id]
}

func (h *hitCounter) total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.hits {
		n += c
	}
	return n
}

func TestProxyStaleNeverReachesBackend(t *testing.T) {
	hc := newHitCounter()
	e := newPxEnv(t, hc, httpfence.ProxyConfig{})
	if r := e.send("POST", "/", e.token(t, 34, "node-b"), "X-Req", "b"); r.status != 200 || r.body != "ok b" {
		t.Fatalf("leader 34: %+v", r)
	}
	r := e.send("POST", "/", e.token(t, 33, "node-a"), "X-Req", "a")
	if r.status != http.StatusConflict || r.refusal.Code != "stale_epoch" {
		t.Fatalf("stale: %+v", r)
	}
	if r.refusal.Presented == nil || *r.refusal.Presented != gtEp(33, "node-a") ||
		r.refusal.Highest == nil || *r.refusal.Highest != gtEp(34, "node-b") {
		t.Fatalf("refusal does not name both epochs: %+v", r.refusal)
	}
	if r.refusal.Resource == "" {
		t.Fatalf("refusal has no resource: %+v", r.refusal)
	}
	r = e.send("POST", "/", e.token(t, 34, "node-c"), "X-Req", "c")
	if r.status != http.StatusConflict || r.refusal.Code != "conflicting_epoch" {
		t.Fatalf("conflict: %+v", r)
	}
	if n := hc.count("a") + hc.count("c"); n != 0 {
		t.Fatalf("refused requests reached the backend %d times", n)
	}
	if r := e.send("POST", "/", e.token(t, 34, "node-b"), "X-Req", "b"); r.status != 200 {
		t.Fatalf("leader 34 again: %+v", r)
	}
}

// TestProxyOlderEpochFinishesBeforeNewer holds a request of epoch 33 in the
// backend and sends one of epoch 34: the newer one must not reach the
// backend until the older one has finished, and afterwards 33 is refused.
func TestProxyOlderEpochFinishesBeforeNewer(t *testing.T) {
	// The old request is held before its response header, or after the
	// header and part of the body were sent: the write must last until the
	// body is complete.
	// The third time the old request's client gives up while the backend
	// still works on it.
	eachTransport(t, func(t *testing.T, std bool) {
		t.Run("held before header", func(t *testing.T) { testOlderFirst(t, nil, std, false, false) })
		t.Run("held mid-body", func(t *testing.T) { testOlderFirst(t, nil, std, true, false) })
		t.Run("client gone", func(t *testing.T) { testOlderFirst(t, nil, std, false, true) })
	})
}

// testOlderFirst runs the scenario with the Guard over fence (nil: Memory).
func testOlderFirst(t *testing.T, fence storageguard.Fence, std, midBody, clientGone bool) {
	oldIn := make(chan struct{})
	releaseOld := make(chan struct{})
	newIn := make(chan bool, 1) // whether the old request had finished
	var oldDone atomic.Bool
	var oldHits atomic.Int64
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("X-Req") {
		case "old":
			if oldHits.Add(1) > 1 {
				t.Error("a second old request reached the backend")
				return
			}
			defer oldDone.Store(true)
			io.Copy(io.Discard, r.Body)
			if midBody {
				w.Header().Set("Content-Length", fmt.Sprint(64<<10))
				io.WriteString(w, strings.Repeat("o", 32<<10))
				http.NewResponseController(w).Flush()
			}
			close(oldIn)
			select {
			case <-releaseOld:
			case <-time.After(waitLimit):
			}
			io.WriteString(w, strings.Repeat("o", 32<<10))
			if !midBody {
				io.WriteString(w, strings.Repeat("o", 32<<10))
			}
		case "new":
			newIn <- oldDone.Load()
			io.WriteString(w, "new")
		}
	})
	e := newPxEnvOver(t, fence, backend, pxConfig(t, std, httpfence.ProxyConfig{}))
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(releaseOld) }) }
	t.Cleanup(release) // before the servers close, even if the test failed
	newAtFence := make(chan struct{})
	var once sync.Once
	e.spy.OnDecide = func(ep epoch.Epoch) {
		if ep.Term == 34 {
			once.Do(func() { close(newAtFence) })
		}
	}
	oldTok, newTok := e.token(t, 33, "node-a"), e.token(t, 34, "node-b")

	oldCtx, cancelOld := context.WithCancel(context.Background())
	defer cancelOld()
	oldRes := async(func() pxResult { return e.sendCtx(oldCtx, "POST", "/", oldTok, "X-Req", "old") })
	recv(t, oldIn, "the old request in the backend")
	if clientGone {
		cancelOld()
		if r := recv(t, oldRes, "the old client to give up"); !errors.Is(r.err, context.Canceled) {
			t.Fatalf("old client: %+v", r)
		}
	}
	newRes := async(func() pxResult { return e.send("POST", "/", newTok, "X-Req", "new") })
	recv(t, newAtFence, "the new request at the fence")
	// The new request is at the fence while the old one is held. Give it
	// ample time to (wrongly) overtake; a correct proxy holds it back.
	select {
	case <-newIn:
		t.Fatal("the epoch-34 request reached the backend while an epoch-33 request was in flight")
	case <-time.After(100 * time.Millisecond):
	}
	release()
	if !clientGone {
		if r := recv(t, oldRes, "the old response"); r.status != 200 || len(r.body) != 64<<10 || r.err != nil {
			t.Fatalf("old request: status %d, %d bytes, err %v", r.status, len(r.body), r.err)
		}
	}
	if finished := recv(t, newIn, "the new request in the backend"); !finished {
		t.Fatal("the epoch-34 request reached the backend before the epoch-33 request finished")
	}
	if r := recv(t, newRes, "the new response"); r.status != 200 || r.body != "new" {
		t.Fatalf("new request: %+v", r)
	}
	if r := e.send("POST", "/", oldTok, "X-Req", "old"); r.status != http.StatusConflict {
		t.Fatalf("epoch 33 after 34: %+v", r)
	}
	if n := oldHits.Load(); n != 1 {
		t.Fatalf("old requests in backend: %d, want 1", n)
	}
}

func TestProxyRefusesBadTokens(t *testing.T) {
	hc := newHitCounter()
	e := newPxEnv(t, hc, httpfence.ProxyConfig{})
	leader := e.token(t, 5, "node-a")
	if r := e.send("POST", "/", leader, "X-Req", "leader"); r.status != 200 {
		t.Fatalf("leader: %+v", r)
	}
	before, beforeReads := e.spy.Calls.Load(), e.spy.Reads.Load()

	huge := gtEp(epoch.MaxTerm, "mallory")
	otherKey := gtCodec(t, []byte("a different key that nobody shares!!"))
	foreign := gtSign(t, e.codec, epoch.Epoch{Cluster: "billing", Term: epoch.MaxTerm, Leader: "node-x"})
	cases := []struct {
		name   string
		tokens []string
		status int
		code   string
	}{
		{"missing", nil, 401, "missing_token"},
		{"empty", []string{""}, 401, "missing_token"},
		{"garbage", []string{"garbage"}, 401, "malformed_token"},
		{"duplicate", []string{leader[0], leader[0]}, 401, "malformed_token"},
		{"oversized", []string{strings.Repeat("x", epoch.MaxTokenLen+1)}, 401, "malformed_token"},
		{"unsigned huge term", []string{huge.String()}, 401, "unsigned_token"},
		{"forged huge term", []string{gtSign(t, otherKey, huge)}, 403, "bad_signature"},
		{"foreign cluster", []string{foreign}, 403, "foreign_cluster"},
	}
	for _, c := range cases {
		r := e.send("POST", "/", c.tokens, "X-Req", c.name)
		if r.err != nil || r.status != c.status || r.refusal.Code != c.code {
			t.Errorf("%s: status %d code %q err %v, want %d %q", c.name, r.status, r.refusal.Code, r.err, c.status, c.code)
			continue
		}
		if c.status == 401 && r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", c.name)
		}
		// Nothing about the resource leaks to a request whose token did not
		// verify: not its highest epoch, not its name (by default the
		// backend's URL).
		if r.refusal.Highest != nil || r.refusal.Resource != "" || strings.Contains(r.body, e.backend.Listener.Addr().String()) {
			t.Errorf("%s: refusal leaks the resource: %s", c.name, r.body)
		}
		if hc.count(c.name) != 0 {
			t.Errorf("%s: reached the backend", c.name)
		}
	}
	if r := e.send("POST", "/", []string{foreign}, "X-Req", "f"); r.refusal.Presented == nil || r.refusal.Presented.Cluster != "billing" {
		t.Errorf("foreign refusal does not name the presented epoch: %+v", r.refusal)
	}
	if n := e.spy.Calls.Load() - before; n != 0 {
		t.Fatalf("refused tokens reached the fence's Do/Admit/Check %d times", n)
	}
	if n := e.spy.Reads.Load() - beforeReads; n != 0 {
		t.Fatalf("refusing unauthenticated tokens read the fence (Highest) %d times", n)
	}
	// The real leader still writes; the forged huge term raised nothing.
	if r := e.send("POST", "/", leader, "X-Req", "leader"); r.status != 200 {
		t.Fatalf("leader after forgeries: %+v", r)
	}
	if r := e.send("POST", "/", e.token(t, 6, "node-b"), "X-Req", "next"); r.status != 200 {
		t.Fatalf("next leader: %+v", r)
	}
}

// TestProxySameEpochConcurrent holds n requests of one epoch in the backend
// at once: each waits until all n are in. A proxy that serialized them would
// never get there.
func TestProxySameEpochConcurrent(t *testing.T) {
	const n = 16
	var in atomic.Int64
	all := make(chan struct{})
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if in.Add(1) == n {
			close(all)
		}
		select {
		case <-all:
			io.WriteString(w, "together")
		case <-time.After(waitLimit):
			http.Error(w, "alone", http.StatusInternalServerError)
		}
	})
	e := newPxEnv(t, backend, httpfence.ProxyConfig{})
	tok := e.token(t, 7, "node-a")
	results := make([]<-chan pxResult, n)
	for i := range results {
		results[i] = async(func() pxResult { return e.send("POST", "/", tok) })
	}
	for i, ch := range results {
		if r := recv(t, ch, "a concurrent response"); r.status != 200 || r.body != "together" {
			t.Fatalf("request %d: %+v", i, r)
		}
	}
}

func TestProxyRoundTripperEndToEnd(t *testing.T) {
	hc := newHitCounter()
	e := newPxEnv(t, hc, httpfence.ProxyConfig{})
	var current atomic.Pointer[epoch.Epoch]
	leaderOf := func(ep epoch.Epoch) *http.Client {
		base := &http.Transport{}
		t.Cleanup(base.CloseIdleConnections)
		return &http.Client{Transport: epoch.RoundTripper(base, func() (string, error) { return e.codec.Sign(ep) })}
	}
	follow := &http.Transport{}
	t.Cleanup(follow.CloseIdleConnections)
	// A client that always stamps the current leader's token.
	live := &http.Client{Transport: epoch.RoundTripper(follow, func() (string, error) { return e.codec.Sign(*current.Load()) })}

	post := func(c *http.Client, id string) pxResult {
		req, _ := http.NewRequest("POST", e.proxy.URL+"/ledger", strings.NewReader("x"))
		req.Header.Set("X-Req", id)
		return doRequest(c, req)
	}
	e33 := gtEp(33, "node-a")
	current.Store(&e33)
	paused := leaderOf(e33) // node-a, about to be paused with its token 33
	if r := post(live, "a1"); r.status != 200 || r.body != "ok a1" {
		t.Fatalf("leader 33: %+v", r)
	}
	e34 := gtEp(34, "node-b")
	current.Store(&e34)
	if r := post(live, "b1"); r.status != 200 || r.body != "ok b1" {
		t.Fatalf("leader 34: %+v", r)
	}
	r := post(paused, "a2")
	if r.status != http.StatusConflict || r.refusal.Code != "stale_epoch" || *r.refusal.Presented != e33 || *r.refusal.Highest != e34 {
		t.Fatalf("paused leader 33: %+v", r)
	}
	if hc.count("a2") != 0 {
		t.Fatal("the paused leader's write reached the backend")
	}
	// The token was stripped on the way to the backend.
	hc.mu.Lock()
	seen := hc.tok["b1"]
	hc.mu.Unlock()
	if seen != "" {
		t.Fatalf("backend saw token %q; the default strips it", seen)
	}
}

func TestProxyTokenForwarding(t *testing.T) {
	for _, forward := range []bool{false, true} {
		hc := newHitCounter()
		e := newPxEnv(t, hc, httpfence.ProxyConfig{ForwardToken: forward})
		tok := e.token(t, 3, "node-a")
		if r := e.send("POST", "/", tok, "X-Req", "w"); r.status != 200 {
			t.Fatalf("forward=%v: %+v", forward, r)
		}
		hc.mu.Lock()
		seen := hc.tok["w"]
		hc.mu.Unlock()
		want := ""
		if forward {
			want = tok[0]
		}
		if seen != want {
			t.Fatalf("forward=%v: backend saw token %q, want %q", forward, seen, want)
		}
	}
}

func TestProxyUnfencedReads(t *testing.T) {
	for _, open := range []bool{false, true} {
		hc := newHitCounter()
		e := newPxEnv(t, hc, httpfence.ProxyConfig{UnfencedReads: open})
		if r := e.send("POST", "/", e.token(t, 9, "node-a")); r.status != 200 {
			t.Fatal(r)
		}
		wantGet := http.StatusUnauthorized
		if open {
			wantGet = http.StatusOK
		}
		ctx := context.Background()
		if r := e.sendBody(ctx, "GET", "/", nil, nil, "X-Req", "get"); r.status != wantGet {
			t.Errorf("open=%v: GET without token: %d, want %d", open, r.status, wantGet)
		}
		if r := e.sendBody(ctx, "HEAD", "/", nil, nil, "X-Req", "head"); r.status != wantGet {
			t.Errorf("open=%v: HEAD without token: %d, want %d", open, r.status, wantGet)
		}
		// Reads that may be writes in disguise need a token: a GET with a
		// body, or with a method override, in any spelling.
		disguised := []struct {
			name string
			body []byte
			kv   []string
		}{
			{"get-body", []byte("x=1"), nil},
			{"get-override", nil, []string{"X-HTTP-Method-Override", "POST"}},
			{"get-override-2", nil, []string{"x_http_method_override", "DELETE"}},
			{"get-method", nil, []string{"X-HTTP-Method", "PUT"}},
			{"get-method-override", nil, []string{"X-Method-Override", "PATCH"}},
		}
		for _, d := range disguised {
			req, err := tokenRequest(ctx, "GET", e.proxy.URL+"/", nil, d.body, append([]string{"X-Req", d.name}, d.kv...)...)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i+1 < len(d.kv); i += 2 {
				// Keep the spelling: Header.Set canonicalises.
				req.Header.Del(d.kv[i])
				req.Header[d.kv[i]] = []string{d.kv[i+1]}
			}
			if r := doRequest(e.client, req); r.status != http.StatusUnauthorized {
				t.Errorf("open=%v: %s without token: %d, want 401", open, d.name, r.status)
			}
			if n := hc.count(d.name); n != 0 {
				t.Errorf("open=%v: %s reached the backend unfenced", open, d.name)
			}
		}
		if r := e.send("POST", "/", nil, "X-Req", "post"); r.status != http.StatusUnauthorized {
			t.Errorf("open=%v: POST without token: %d", open, r.status)
		}
		// A read that carries a token is fenced.
		if r := e.send("GET", "/", e.token(t, 8, "node-z"), "X-Req", "stale-get"); r.status != http.StatusConflict {
			t.Errorf("open=%v: stale GET: %d", open, r.status)
		}
		wantHits := 0
		if open {
			wantHits = 1
		}
		if hc.count("get") != wantHits || hc.count("head") != wantHits || hc.count("post") != 0 || hc.count("stale-get") != 0 {
			t.Errorf("open=%v: backend hits %v", open, hc.hits)
		}
	}
}

func TestProxyResourceMapping(t *testing.T) {
	hc := newHitCounter()
	e := newPxEnv(t, hc, httpfence.ProxyConfig{Resource: func(r *http.Request) string {
		return strings.TrimPrefix(r.URL.Path, "/")
	}})
	if r := e.send("POST", "/a", e.token(t, 34, "node-b")); r.status != 200 {
		t.Fatal(r)
	}
	// Resource b has its own high-water mark.
	if r := e.send("POST", "/b", e.token(t, 33, "node-a")); r.status != 200 {
		t.Fatalf("b at 33: %+v", r)
	}
	if r := e.send("POST", "/a", e.token(t, 33, "node-a")); r.status != http.StatusConflict || r.refusal.Resource != "a" {
		t.Fatalf("a at 33: %+v", r)
	}
	if r := e.send("POST", "/", e.token(t, 35, "node-c"), "X-Req", "empty"); r.status != http.StatusBadRequest || r.refusal.Code != "bad_resource" {
		t.Fatalf("empty resource: %+v", r)
	}
	if hc.count("empty") != 0 {
		t.Fatal("bad resource reached the backend")
	}
}

func TestProxyMisconfigured(t *testing.T) {
	hc := newHitCounter()
	backend := httptest.NewServer(hc)
	defer backend.Close()
	target, _ := url.Parse(backend.URL)
	codec := gtCodec(t, gtKey)
	g := storageguard.NewGuard(storageguard.NewMemory(), storageguard.GuardConfig{Verifier: codec})
	tok := gtSign(t, codec, gtEp(1, "node-a"))
	handlers := map[string]http.Handler{
		"nil guard":        httpfence.NewProxy(nil, target, httpfence.ProxyConfig{}),
		"nil fence":        httpfence.NewProxy(storageguard.NewGuard(nil, storageguard.GuardConfig{Verifier: codec}), target, httpfence.ProxyConfig{}),
		"nil target":       httpfence.NewProxy(g, nil, httpfence.ProxyConfig{}),
		"relative target":  httpfence.NewProxy(g, &url.URL{Path: "/x"}, httpfence.ProxyConfig{}),
		"negative timeout": httpfence.NewProxy(g, target, httpfence.ProxyConfig{Timeout: -time.Second}),
		"huge target path": httpfence.NewProxy(g, &url.URL{Scheme: "http", Host: target.Host, Path: "/" + strings.Repeat("p", storageguard.MaxResourceLen)}, httpfence.ProxyConfig{}),
	}
	for name, h := range handlers {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "/", strings.NewReader("x"))
		req.Header.Set(epoch.Header, tok)
		h.ServeHTTP(rec, req)
		var body httpfence.Refusal
		_ = json.Unmarshal(rec.Body.Bytes(), &body)
		if rec.Code != http.StatusInternalServerError || body.Code != "misconfigured" {
			t.Errorf("%s: %d %+v", name, rec.Code, body)
		}
	}
	if n := hc.total(); n != 0 {
		t.Fatalf("a misconfigured proxy forwarded %d requests", n)
	}
	if err := (httpfence.ProxyConfig{Timeout: -1}).Validate(); !errors.Is(err, storageguard.ErrBadConfig) {
		t.Fatalf("Validate: %v", err)
	}
}

// TestProxyBackendHangs: a backend that never answers is cut off at the
// timeout with 504, sees its request cancelled, and a newer epoch then gets
// through.
func TestProxyBackendHangs(t *testing.T) { eachTransport(t, testProxyBackendHangs) }

func testProxyBackendHangs(t *testing.T, std bool) {
	cancelled := make(chan struct{}, 2)
	// hang waits for the request to be cancelled; the server notices a
	// closed connection only once the request body was read.
	hang := func(r *http.Request) {
		select {
		case <-r.Context().Done():
			cancelled <- struct{}{}
		case <-time.After(waitLimit):
		}
	}
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		switch r.Header.Get("X-Req") {
		case "hang":
			hang(r)
		case "hang-body":
			w.WriteHeader(200)
			io.WriteString(w, "partial")
			http.NewResponseController(w).Flush()
			hang(r)
		default:
			io.WriteString(w, "ok")
		}
	})
	e := newPxEnv(t, backend, pxConfig(t, std, httpfence.ProxyConfig{Timeout: 200 * time.Millisecond}))
	r := e.send("POST", "/", e.token(t, 1, "node-a"), "X-Req", "hang")
	if r.status != http.StatusGatewayTimeout || r.refusal.Code != "backend_timeout" || r.refusal.Presented == nil {
		t.Fatalf("hanging backend: %+v", r)
	}
	recv(t, cancelled, "the backend to see its request cancelled")
	// Headers sent, then the backend hangs: the client connection is cut.
	r = e.send("POST", "/", e.token(t, 2, "node-b"), "X-Req", "hang-body")
	if r.err == nil {
		t.Fatalf("a body cut off at the timeout read as complete: %+v", r)
	}
	recv(t, cancelled, "the backend to see its request cancelled")
	if r := e.send("POST", "/", e.token(t, 3, "node-c"), "X-Req", "next"); r.status != 200 || r.body != "ok" {
		t.Fatalf("newer epoch after a timeout: %+v", r)
	}
}

// lateTransport answers every request only late after its context ended,
// as the backend exchange does when the machine is loaded: the proxy gets
// to its answer well after the timeout.
type lateTransport struct{ late time.Duration }

func (lt lateTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		r.Body.Close()
	}
	<-r.Context().Done()
	time.Sleep(lt.late) // the injected lateness, not a wait for an event
	return nil, r.Context().Err()
}

// TestProxyAnswersLateTimeout: a backend exchange that the proxy ends only
// after its timeout and the write grace have both passed still gets its 504
// to the client; the client's write deadline counts from the answer. Fails
// when the deadline set at the start of the exchange still applies (the
// client then reads a reset instead).
func TestProxyAnswersLateTimeout(t *testing.T) {
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	e := newPxEnv(t, backend, httpfence.ProxyConfig{Timeout: 100 * time.Millisecond, Transport: lateTransport{late: 400 * time.Millisecond}})
	r := e.send("POST", "/", e.token(t, 1, "node-a"), "X-Req", "late")
	if r.err != nil || r.status != http.StatusGatewayTimeout || r.refusal.Code != "backend_timeout" {
		t.Fatalf("late backend timeout: status %d, refusal %+v, err %v; want 504 backend_timeout", r.status, r.refusal, r.err)
	}
}

// TestProxyBackendFails: a reset connection or an unreachable backend is a
// 502; a response cut off mid-body aborts the client connection. Each time
// the fence is released.
func TestProxyBackendFails(t *testing.T) { eachTransport(t, testProxyBackendFails) }

func testProxyBackendFails(t *testing.T, std bool) {
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("X-Req") {
		case "reset":
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		case "cut":
			w.Header().Set("Content-Length", "100")
			io.WriteString(w, "only ten!!")
			http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler)
		default:
			io.WriteString(w, "ok")
		}
	})
	// The backend may act on a request it reset or cut off: each holds its
	// epoch until the timeout, which the next (newer) epoch waits for.
	stats := new(httpfence.ProxyStats)
	e := newPxEnv(t, backend, pxConfig(t, std, httpfence.ProxyConfig{Timeout: 2 * time.Second, Stats: stats}))
	if r := e.send("POST", "/", e.token(t, 1, "node-a"), "X-Req", "reset"); r.status != http.StatusBadGateway || r.refusal.Code != "backend_error" {
		t.Fatalf("reset: %+v", r)
	}
	r := e.send("POST", "/", e.token(t, 2, "node-b"), "X-Req", "cut")
	if r.err == nil {
		t.Fatalf("a cut-off body read as complete: %+v", r)
	}
	if r := e.send("POST", "/", e.token(t, 3, "node-c"), "X-Req", "ok"); r.status != 200 {
		t.Fatalf("newer epoch after failures: %+v", r)
	}
	if r := e.send("POST", "/", e.token(t, 2, "node-b"), "X-Req", "ok"); r.status != http.StatusConflict {
		t.Fatalf("older epoch after failures: %+v", r)
	}
	if n := stats.Held(); n != 2 {
		t.Fatalf("ProxyStats.Held = %d, want 2 (the reset and the cut-off request)", n)
	}

	// Unreachable backend.
	dead := httptest.NewServer(http.NotFoundHandler())
	target, _ := url.Parse(dead.URL)
	dead.Close()
	codec := gtCodec(t, gtKey)
	g := storageguard.NewGuard(storageguard.NewMemory(), storageguard.GuardConfig{Verifier: codec})
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/", strings.NewReader("x"))
	req.Header.Set(epoch.Header, gtSign(t, codec, gtEp(1, "node-a")))
	httpfence.NewProxy(g, target, pxConfig(t, std, httpfence.ProxyConfig{ErrorLog: discardLog})).ServeHTTP(rec, req)
	if rec.Code != http.StatusBadGateway {
		t.Fatalf("unreachable backend: %d %s", rec.Code, rec.Body)
	}
}

// TestProxyDefaultTransport runs requests through the proxy's own transport.
func TestProxyDefaultTransport(t *testing.T) {
	hc := newHitCounter()
	backend := httptest.NewServer(hc)
	defer backend.Close()
	target, _ := url.Parse(backend.URL)
	codec := gtCodec(t, gtKey)
	g := storageguard.NewGuard(storageguard.NewMemory(), storageguard.GuardConfig{Verifier: codec})
	proxy := httptest.NewServer(httpfence.NewProxy(g, target, httpfence.ProxyConfig{}))
	defer proxy.Close()
	conn, err := net.Dial("tcp", proxy.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Raw HTTP/1.1, so nothing in the client rewrites the duplicate headers.
	tok := gtSign(t, codec, gtEp(1, "node-a"))
	io.WriteString(conn, "POST / HTTP/1.1\r\nHost: x\r\nX-Req: raw\r\nFencing-Token: "+tok+"\r\nContent-Length: 0\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != "ok raw" {
		t.Fatalf("%d %q", resp.StatusCode, b)
	}
	io.WriteString(conn, "POST / HTTP/1.1\r\nHost: x\r\nX-Req: dup\r\nfencing-token: "+tok+"\r\nFencing-Token: "+tok+"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || hc.count("dup") != 0 {
		t.Fatalf("duplicate headers in two spellings: %d, backend hits %d", resp.StatusCode, hc.count("dup"))
	}
}

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestProxyUnreadBodyKeepsConnection: a request whose body the backend
// never read (here: the backend is down, so nothing was sent) is answered
// 502 and the client's connection stays usable. The proxy serves in full
// duplex, and net/http's HTTP/1 server then panics reading the next request
// if a handler left its body unread (golang/go#68560): the proxy must not
// leave it so.
func TestProxyUnreadBodyKeepsConnection(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	target, _ := url.Parse(dead.URL)
	dead.Close()
	codec := gtCodec(t, gtKey)
	g := storageguard.NewGuard(storageguard.NewMemory(), storageguard.GuardConfig{Verifier: codec})
	eachTransport(t, func(t *testing.T, std bool) {
		var logged syncBuffer
		var conns atomic.Int64
		proxy := httptest.NewUnstartedServer(httpfence.NewProxy(g, target, pxConfig(t, std, httpfence.ProxyConfig{})))
		proxy.Config.ErrorLog = log.New(&logged, "", 0)
		proxy.Config.ConnState = func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		}
		proxy.Start()
		defer proxy.Close()
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr}
		tok := []string{gtSign(t, codec, gtEp(1, "node-a"))}
		for i := range 3 {
			req, err := tokenRequest(context.Background(), "POST", proxy.URL, tok, []byte("a body nobody reads"))
			if err != nil {
				t.Fatal(err)
			}
			if r := doRequest(client, req); r.err != nil || r.status != http.StatusBadGateway {
				t.Fatalf("request %d: %d %v, want 502", i, r.status, r.err)
			}
		}
		if s := logged.String(); strings.Contains(s, "panic") {
			t.Fatalf("the proxy's server panicked:\n%s", s)
		}
		if n := conns.Load(); n != 1 {
			t.Fatalf("3 requests took %d client connections, want 1 (kept alive)", n)
		}
	})
}

// TestProxyStripsTokenSpellings: a header that a CGI or WSGI backend maps
// to the same variable as Fencing-Token (HTTP_FENCING_TOKEN) never reaches
// the backend, in the header or the trailer, whether or not the verified
// token is forwarded: the backend must not read a token the proxy did not
// verify.
func TestProxyStripsTokenSpellings(t *testing.T) {
	spellings := []string{"Fencing_Token", "FENCING_TOKEN", "fencing_token", "Fencing_token", "HTTP_FENCING_TOKEN", "Http-Fencing-Token", "http_fencing_token"}
	for _, forward := range []bool{false, true} {
		var mu sync.Mutex
		var seen []string
		backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body) // the trailer arrives after the body
			mu.Lock()
			defer mu.Unlock()
			for _, h := range []http.Header{r.Header, r.Trailer} {
				for k, v := range h {
					if strings.Contains(strings.ToUpper(strings.ReplaceAll(k, "-", "_")), "FENCING_TOKEN") {
						seen = append(seen, k+"="+strings.Join(v, ","))
					}
				}
			}
		})
		e := newPxEnv(t, backend, httpfence.ProxyConfig{ForwardToken: forward})
		tok := e.token(t, 3, "node-a")
		forged := gtSign(t, e.codec, gtEp(1<<40, "mallory")) // not what the proxy verified
		req, err := tokenRequest(context.Background(), "POST", e.proxy.URL+"/", tok, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Body = io.NopCloser(strings.NewReader("payload"))
		req.ContentLength = -1 // chunked, so that trailers can be sent
		req.Trailer = http.Header{}
		for _, s := range spellings {
			req.Header[s] = []string{forged} // as spelled: Header.Set would canonicalise
			req.Trailer[s] = []string{forged}
		}
		if r := doRequest(e.client, req); r.status != 200 {
			t.Fatalf("forward=%v: %+v", forward, r)
		}
		mu.Lock()
		want := 0
		if forward {
			want = 1
		}
		if len(seen) != want || (forward && seen[0] != epoch.Header+"="+tok[0]) {
			t.Errorf("forward=%v: the backend saw %v, want only the verified token if forwarded", forward, seen)
		}
		mu.Unlock()
	}
}

// bareWriter wraps a ResponseWriter without Unwrap, as a careless
// middleware in front of the proxy would.
type bareWriter struct{ http.ResponseWriter }

// unwrapWriter is the same wrapper done right.
type unwrapWriter struct{ http.ResponseWriter }

func (u unwrapWriter) Unwrap() http.ResponseWriter { return u.ResponseWriter }

// TestProxyWarnsWhenItCannotBoundClients: behind a ResponseWriter wrapper
// without Unwrap the proxy cannot set the client connection's deadlines;
// it still serves, and says so once in its ErrorLog (not per request).
// Behind a wrapper with Unwrap it says nothing, over HTTP/1.1 or HTTP/2.
func TestProxyWarnsWhenItCannotBoundClients(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok"))
	}))
	defer backend.Close()
	target, _ := url.Parse(backend.URL)
	for _, c := range []struct {
		name  string
		wrap  func(http.ResponseWriter) http.ResponseWriter
		h2    bool
		lines int
	}{
		{"no Unwrap", func(w http.ResponseWriter) http.ResponseWriter { return bareWriter{w} }, false, 1},
		{"Unwrap", func(w http.ResponseWriter) http.ResponseWriter { return unwrapWriter{w} }, false, 0},
		{"Unwrap, HTTP/2", func(w http.ResponseWriter) http.ResponseWriter { return unwrapWriter{w} }, true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newPxEnv(t, http.NotFoundHandler(), httpfence.ProxyConfig{})
			var logged syncBuffer
			p := httpfence.NewProxy(e.guard, target, httpfence.ProxyConfig{ErrorLog: log.New(&logged, "", 0)})
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if c.h2 && r.ProtoMajor != 2 {
					t.Errorf("request over %s, want HTTP/2", r.Proto)
				}
				p.ServeHTTP(c.wrap(w), r)
			}))
			if c.h2 {
				srv.EnableHTTP2 = true
				srv.StartTLS()
			} else {
				srv.Start()
			}
			defer srv.Close()
			tok := e.token(t, 7, "n1")
			for range 3 {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/x", strings.NewReader("body"))
				req.Header.Set(epoch.Header, tok[0])
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || string(b) != "ok" {
					t.Fatalf("through the wrapper: %d %q", resp.StatusCode, b)
				}
			}
			srv.Client().CloseIdleConnections()
			out := logged.String()
			if n := strings.Count(out, "lacks Unwrap"); n != c.lines {
				t.Fatalf("%d warnings in the error log, want %d:\n%s", n, c.lines, out)
			}
		})
	}
}
