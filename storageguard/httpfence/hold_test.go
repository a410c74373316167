package httpfence_test

import (
	"context"
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
	"github.com/termfence/termfence/storageguard/httpfence"
)

// Reproductions of the proxy's hold going wrong: an older epoch's client
// goes away while the backend already works on its request. The hold on
// the older epoch must last until the backend is provably done, so that the
// older write never lands after a newer epoch was admitted.

// holdTimeout is the proxy's Timeout in the hold tests, and holdWork how
// long the backend works on the older request (the 500 ms); the
// first must comfortably exceed the second, even on a loaded machine.
const (
	holdTimeout = 3 * time.Second
	holdWork    = 500 * time.Millisecond
)

// goneHow is how the older request's client goes away.
type goneHow int

const (
	closeSocket goneHow = iota // HTTP/1.1: the client closes its connection
	resetStream                // h2c: the client resets its stream
)

func (g goneHow) String() string { return [...]string{"HTTP/1.1 close", "h2c reset"}[g] }

// frontServer serves h over HTTP/1.1 and unencrypted HTTP/2 (h2c).
func frontServer(t testing.TB, h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(waited(t, h))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// h2cClient returns a client that speaks only h2c.
func h2cClient(t testing.TB) *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// holdRecorder is a backend that records, for the older request, whether
// the newer epoch had already been admitted when it finished acting on it.
type holdRecorder struct {
	oldIn    chan struct{} // closed when the older request reaches the backend
	oldDone  chan struct{} // closed when the backend has acted on it
	newHeld  chan struct{} // closed when the fence admits and holds epoch 34
	newHeldT atomic.Int64  // UnixNano of newHeld
	atFenceT atomic.Int64  // UnixNano of epoch 34 reaching the fence
	oldLate  atomic.Bool   // the older write landed after epoch 34 was held
	oldHits  atomic.Int64
	once     sync.Once
	fence    sync.Once
}

func newHoldRecorder() *holdRecorder {
	return &holdRecorder{oldIn: make(chan struct{}), oldDone: make(chan struct{}), newHeld: make(chan struct{})}
}

func (h *holdRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Header.Get("X-Req") {
	case "old":
		if h.oldHits.Add(1) > 1 {
			return
		}
		close(h.oldIn)
		// The backend works on the request (it has its header and acts
		// without waiting for the body); a newer epoch admitted meanwhile
		// makes it finish at once, so that the wrong order is certain.
		t := time.NewTimer(holdWork)
		select {
		case <-t.C:
		case <-h.newHeld:
			t.Stop()
		}
		h.oldLate.Store(isClosed(h.newHeld))
		close(h.oldDone)
		io.WriteString(w, "old")
	case "new":
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "new")
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// watch hooks the recorder to the fence's admissions of epoch 34.
func (h *holdRecorder) watch(spy interface {
	setHooks(onDecide, onHold func(epoch.Epoch))
}) {
	spy.setHooks(func(ep epoch.Epoch) {
		if ep.Term == 34 {
			h.fence.Do(func() { h.atFenceT.Store(time.Now().UnixNano()) })
		}
	}, func(ep epoch.Epoch) {
		if ep.Term == 34 {
			h.once.Do(func() {
				h.newHeldT.Store(time.Now().UnixNano())
				close(h.newHeld)
			})
		}
	})
}

// holdFront is the fenced front under test with what the test needs of it.
type holdFront struct {
	url   string
	codec epoch.Codec
	stats *httpfence.ProxyStats
}

// spyHooks adapts a pxEnv's spy to holdRecorder.watch.
type spyHooks struct{ e *pxEnv }

func (s spyHooks) setHooks(d, h func(epoch.Epoch)) { s.e.spy.OnDecide, s.e.spy.OnHold = d, h }

// proxyFront starts a backend rec and a proxy in front of it served over
// HTTP/1.1 and h2c.
func proxyFront(t *testing.T, rec *holdRecorder, std bool) holdFront {
	backend := httptest.NewServer(rec)
	t.Cleanup(backend.Close)
	stats := new(httpfence.ProxyStats)
	cfg := pxConfig(t, std, httpfence.ProxyConfig{Timeout: holdTimeout, Stats: stats})
	e := newPxEnvTo(t, backend.URL, cfg)
	rec.watch(spyHooks{e})
	target, _ := url.Parse(backend.URL)
	front := frontServer(t, httpfence.NewProxy(e.guard, target, withDiscardLog(cfg)))
	return holdFront{url: front.URL, codec: e.codec, stats: stats}
}

func withDiscardLog(cfg httpfence.ProxyConfig) httpfence.ProxyConfig {
	if cfg.ErrorLog == nil {
		cfg.ErrorLog = discardLog
	}
	return cfg
}

// middlewareFront starts a backend rec and, in front of it, a Middleware
// whose handler forwards each request to rec with its own context, as a Go
// service calling its storage over HTTP would.
func middlewareFront(t *testing.T, rec *holdRecorder) holdFront {
	backend := httptest.NewServer(rec)
	t.Cleanup(backend.Close)
	e := newPxEnvTo(t, backend.URL, httpfence.ProxyConfig{})
	rec.watch(spyHooks{e})
	down := &http.Transport{}
	t.Cleanup(down.CloseIdleConnections)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, backend.URL, strings.NewReader(string(body)))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		req.Header.Set("X-Req", r.Header.Get("X-Req"))
		resp, err := down.RoundTrip(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		io.Copy(w, resp.Body)
	})
	front := frontServer(t, httpfence.Middleware(e.guard, nil)(handler))
	return holdFront{url: front.URL, codec: e.codec}
}

// goneOld sends the epoch-33 request with a body of size bytes, of which
// only sent bytes are sent before the client goes away (how), once the
// backend has the request (rec.oldIn).
func goneOld(t *testing.T, f holdFront, rec *holdRecorder, how goneHow, size, sent int) {
	tok := gtSign(t, f.codec, gtEp(33, "node-a"))
	switch how {
	case closeSocket:
		conn, err := net.Dial("tcp", strings.TrimPrefix(f.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		head := fmt.Sprintf("POST / HTTP/1.1\r\nHost: front\r\n%s: %s\r\nX-Req: old\r\nContent-Length: %d\r\n\r\n", epoch.Header, tok, size)
		if _, err := io.WriteString(conn, head+strings.Repeat("b", sent)); err != nil {
			t.Fatal(err)
		}
		recv(t, rec.oldIn, "the older request at the backend")
		conn.Close()
	case resetStream:
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		pr, pw := io.Pipe()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url, pr)
		req.ContentLength = int64(size)
		req.Header.Set(epoch.Header, tok)
		req.Header.Set("X-Req", "old")
		go func() {
			_, _ = pw.Write([]byte(strings.Repeat("b", sent)))
			if sent == size {
				pw.Close()
			}
		}()
		res := async(func() pxResult { return doRequest(h2cClient(t), req) })
		recv(t, rec.oldIn, "the older request at the backend")
		cancel() // RST_STREAM
		pw.CloseWithError(context.Canceled)
		recv(t, res, "the older client to give up")
	}
}

// checkHold sends the epoch-34 request once the older client is gone and
// checks the order in which the backend acted on the two.
func checkHold(t *testing.T, f holdFront, rec *holdRecorder) {
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	newTok := gtSign(t, f.codec, gtEp(34, "node-b"))
	req, _ := tokenRequest(context.Background(), http.MethodPost, f.url, []string{newTok}, []byte("new"), "X-Req", "new")
	res := async(func() pxResult { return doRequest(c, req) })
	// Generous: the newer request waits for about the proxy's timeout.
	r := recvWithin(t, res, holdTimeout+waitLimit, "the newer response")
	if r.status != http.StatusOK || r.body != "new" {
		t.Fatalf("newer request: %+v", r)
	}
	recv(t, rec.oldDone, "the backend to finish the older request")
	if rec.oldLate.Load() {
		t.Fatal("the backend acted on the epoch-33 request after epoch 34 was admitted: the older hold was released while the backend still worked on it")
	}
	if n := rec.oldHits.Load(); n != 1 {
		t.Fatalf("older request reached the backend %d times, want 1", n)
	}
	wait := time.Duration(rec.newHeldT.Load() - rec.atFenceT.Load())
	t.Logf("epoch 34 waited %v at the fence (timeout %v)", wait.Round(time.Millisecond), holdTimeout)
}

func recvWithin[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("timed out after %v waiting for %s", d, what)
		panic("unreachable")
	}
}

func TestProxyHoldsWhileBackendMayAct(t *testing.T) {
	for _, std := range []bool{false, true} {
		for _, how := range []goneHow{closeSocket, resetStream} {
			for _, size := range []int{8 << 10, 64 << 10} {
				tr := "default transport"
				if std {
					tr = "http.Transport"
				}
				t.Run(fmt.Sprintf("%s/%s/%d KiB", tr, how, size>>10), func(t *testing.T) {
					t.Parallel()
					rec := newHoldRecorder()
					f := proxyFront(t, rec, std)
					goneOld(t, f, rec, how, size, 4<<10)
					checkHold(t, f, rec)
					if n := f.stats.Held(); n != 1 {
						t.Errorf("ProxyStats.Held = %d, want 1", n)
					}
				})
			}
		}
	}
}

func TestMiddlewareHoldsWhileHandlerWorks(t *testing.T) {
	for _, how := range []goneHow{closeSocket, resetStream} {
		t.Run(how.String(), func(t *testing.T) {
			t.Parallel()
			rec := newHoldRecorder()
			f := middlewareFront(t, rec)
			goneOld(t, f, rec, how, 64, 64)
			checkHold(t, f, rec)
		})
	}
}

var discardLog = log.New(io.Discard, "", 0)
