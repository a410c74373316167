package httpfence_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/httpfence"
)

// The backend contract (doc.go, "The backend contract") and the hold it
// buys: no request under an epoch is acted on by the backend once a newer
// epoch's request for its resource was forwarded. The backends here keep
// the contract: each acts on a request at most its BackendTimeout after the
// last byte of it could be read (a lower bound: the time before the read
// that returned it), and checks that bound when it acts. actLog is the
// oracle: the terms it acted on, in the order it acted, never go down.

// actLog records what a backend acted on.
type actLog struct {
	mu   sync.Mutex
	acts []act
}

type act struct {
	term uint64
	path string
}

// act records term as acted on now, if now is within tb of arrival (the
// contract); it reports whether it did.
func (l *actLog) act(term uint64, path string, arrival time.Time, tb time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(arrival) > tb {
		return false // the backend gave up: it never acts after its timeout
	}
	l.acts = append(l.acts, act{term, path})
	return true
}

// check fails t if an older term was acted on after a newer one (for the
// same path, when byPath).
func (l *actLog) check(t testing.TB, byPath bool) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	last := map[string]uint64{}
	for i, a := range l.acts {
		k := ""
		if byPath {
			k = a.path
		}
		if a.term < last[k] {
			t.Fatalf("the backend acted on term %d (act %d, %s) after term %d: %v", a.term, i, a.path, last[k], l.acts)
		}
		last[k] = a.term
	}
}

func (l *actLog) terms() []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ts []uint64
	for _, a := range l.acts {
		ts = append(ts, a.term)
	}
	return ts
}

// readClock is a connection that remembers when the last read that
// returned data returned: when the backend observed the data.
type readClock struct {
	net.Conn
	last atomic.Int64 // UnixNano
}

func (c *readClock) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.last.Store(time.Now().UnixNano())
	}
	return n, err
}

func (c *readClock) arrival() time.Time { return time.Unix(0, c.last.Load()) }

// contractBackend is a raw HTTP/1.1 backend that keeps the contract. Each
// request carries X-Term (its epoch's term) and, optionally, X-Work (how
// long the backend works before it acts, a Go duration); it acts (actLog)
// and then answers 200. It reads each request in full before it works.
// The misbehaving-backend harness adds faults (X-Fault: answer-early,
// crash) and upgraded connections it half-closes (serveUpgrade).
type contractBackend struct {
	log *actLog
	tb  time.Duration
	wg  sync.WaitGroup
	// crash, if set, says for an X-Fault: crash request whether the
	// backend acts before it crashes, and how long it stays down.
	crash func() (actFirst bool, downtime time.Duration)

	mu     sync.Mutex
	ln     net.Listener
	closed bool
	// conns are the open connections, closed by close.
	conns map[net.Conn]bool

	// got counts the requests it read, done those it finished with
	// (acted, gave up, answered early or crashed); upgraded the upgraded
	// connections it still serves.
	got, done, upgraded atomic.Int64
}

func startContractBackend(t testing.TB, log *actLog, tb time.Duration) *contractBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &contractBackend{ln: ln, log: log, tb: tb}
	b.wg.Add(1)
	go b.accept()
	t.Cleanup(b.close)
	return b
}

func (b *contractBackend) url() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return "http://" + b.ln.Addr().String()
}

func (b *contractBackend) close() {
	b.mu.Lock()
	b.closed = true
	b.ln.Close()
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// track adds or removes c from the open connections; a connection that
// comes after close is closed at once.
func (b *contractBackend) track(c net.Conn, open bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conns == nil {
		b.conns = map[net.Conn]bool{}
	}
	switch {
	case open && b.closed:
		c.Close()
	case open:
		b.conns[c] = true
	default:
		delete(b.conns, c)
	}
}

func (b *contractBackend) accept() {
	defer b.wg.Done()
	b.mu.Lock()
	ln := b.ln
	b.mu.Unlock()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.serve(c)
		}()
	}
}

func (b *contractBackend) serve(c net.Conn) {
	b.track(c, true)
	defer b.track(c, false)
	defer c.Close()
	rc := &readClock{Conn: c}
	br := bufio.NewReader(rc)
	for {
		// A connection the proxy forgot (a crash) is not kept for ever.
		_ = c.SetReadDeadline(time.Now().Add(waitLimit))
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		term, _ := strconv.ParseUint(req.Header.Get("X-Term"), 10, 64)
		if req.Header.Get("Upgrade") == "echo" {
			b.serveUpgrade(c, rc, br, req, term)
			return
		}
		if req.Header.Get("X-Fault") == "answer-early" {
			// Answers at the header and closes: the body is not read,
			// and nothing is acted on.
			b.got.Add(1)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nearly")
			b.done.Add(1)
			return
		}
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return
		}
		arrival := rc.arrival()
		b.got.Add(1)
		if w, err := time.ParseDuration(req.Header.Get("X-Work")); err == nil && w > 0 {
			t := time.NewTimer(w)
			<-t.C
		}
		if req.Header.Get("X-Fault") == "crash" && b.crash != nil {
			actFirst, downtime := b.crash()
			if actFirst {
				b.log.act(term, req.URL.Path, arrival, b.tb)
			}
			b.done.Add(1)
			b.crashNow(c, downtime)
			return
		}
		b.log.act(term, req.URL.Path, arrival, b.tb)
		b.done.Add(1)
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
			return
		}
	}
}

// TestProxyLateBodyHeld: an older epoch's client sends its header and all
// but the last byte of its body, is admitted, and pauses (a GC pause) while
// a newer epoch's request waits at the fence; its last byte comes well
// before the proxy's timeout, so the request reaches the backend late, and
// the backend works on it past the proxy's timeout (within its own,
// counted from the arrival). The timeout cuts the exchange off; the proxy
// must then cut the backend connection and hold the epoch for the
// backend's timeout, or the newer request is acted on first (a proxy that
// measured its hold from the request's start alone released it at the
// timeout).
func TestProxyLateBodyHeld(t *testing.T) {
	const (
		timeout = time.Second
		tb      = 800 * time.Millisecond // the backend's own timeout
		work    = 600 * time.Millisecond // < tb: it acts
		pause   = 600 * time.Millisecond // the client's pause; arrival+work > timeout
	)
	acts := new(actLog)
	be := startContractBackend(t, acts, tb)
	stats := new(httpfence.ProxyStats)
	e := newPxEnvTo(t, be.url(), httpfence.ProxyConfig{Timeout: timeout, BackendTimeout: tb, Stats: stats})
	held33, at34 := make(chan struct{}), make(chan struct{})
	var once33, once34 sync.Once
	e.spy.OnHold = func(ep epoch.Epoch) {
		if ep.Term == 33 {
			once33.Do(func() { close(held33) })
		}
	}
	e.spy.OnDecide = func(ep epoch.Epoch) {
		if ep.Term == 34 {
			once34.Do(func() { close(at34) })
		}
	}
	conn, err := net.Dial("tcp", e.proxy.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /acct HTTP/1.1\r\nHost: x\r\n%s: %s\r\nX-Term: 33\r\nX-Work: %v\r\nContent-Length: 10\r\n\r\n123456789", epoch.Header, e.token(t, 33, "node-a")[0], work)
	recv(t, held33, "the older request admitted")
	newer := async(func() pxResult { return e.send("POST", "/acct", e.token(t, 34, "node-b"), "X-Term", "34") })
	recv(t, at34, "the newer request at the fence")
	time.AfterFunc(pause, func() { io.WriteString(conn, "0") }) // the client's pause, the scenario itself
	if r := recvWithin(t, newer, timeout+tb+waitLimit, "the newer response"); r.status != 200 {
		t.Fatalf("newer request: %+v", r)
	}
	waitUntil(t, "the backend to finish both requests", func() bool { return be.done.Load() == 2 })
	acts.check(t, false)
	t.Logf("acted on terms %v; Held %d, TimedOut %d", acts.terms(), stats.Held(), stats.TimedOut())
}

// TestProxyUpgradeHalfClose: a backend that half-closes an upgraded
// connection (ends its sending side) still reads, and acts on what the
// client sends after that. Its end is not the backend's being done: the
// hold lasts until both directions ended and, since the backend's end came
// while the client's side was open, for the backend's timeout after the
// proxy cut the connection.
func TestProxyUpgradeHalfClose(t *testing.T) {
	const (
		timeout = 2 * time.Second
		tb      = time.Second
		work    = 300 * time.Millisecond
	)
	acts := new(actLog)
	upgradedDone := make(chan struct{})
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		term, _ := strconv.ParseUint(r.Header.Get("X-Term"), 10, 64)
		if r.Header.Get("Upgrade") != "echo" {
			acts.act(term, r.URL.Path, time.Now(), tb)
			io.WriteString(w, "plain")
			return
		}
		defer close(upgradedDone)
		conn, brw, err := switchProtocols(w, "echo")
		if err != nil {
			return
		}
		defer conn.Close()
		if _, err := brw.ReadString('\n'); err != nil {
			return
		}
		conn.(*net.TCPConn).CloseWrite() // done sending, still reading
		arrival := time.Now()            // before the read: no later than the bytes arrive
		if _, err := brw.ReadString('\n'); err != nil {
			return
		}
		t := time.NewTimer(work)
		<-t.C
		acts.act(term, r.URL.Path, arrival, tb)
	})
	stats := new(httpfence.ProxyStats)
	e := newPxEnv(t, backend, httpfence.ProxyConfig{Timeout: timeout, BackendTimeout: tb, Stats: stats})
	conn, err := net.Dial("tcp", e.proxy.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(waitLimit))
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\nX-Term: 33\r\n%s: %s\r\n\r\n", epoch.Header, e.token(t, 33, "node-a")[0])
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	io.WriteString(conn, "a\n")
	if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
		t.Fatalf("the backend's end: %q %v", rest, err)
	}
	io.WriteString(conn, "b\n") // after the backend's end: it still reads
	conn.(*net.TCPConn).CloseWrite()
	newer := async(func() pxResult { return e.send("POST", "/ws", e.token(t, 34, "node-b"), "X-Term", "34") })
	if r := recvWithin(t, newer, timeout+tb+waitLimit, "the newer response"); r.status != 200 || r.body != "plain" {
		t.Fatalf("newer request: %+v", r)
	}
	recv(t, upgradedDone, "the backend to finish the upgraded connection")
	acts.check(t, false)
	if n := stats.Held(); n != 1 {
		t.Fatalf("ProxyStats.Held = %d, want 1", n)
	}
	t.Logf("acted on terms %v", acts.terms())
}

// mapStore is a storageguard.Store in memory that outlives the fences
// over it: the durable high-water mark a restarted proxy finds again.
type mapStore struct {
	mu sync.Mutex
	m  map[string]epoch.Epoch
}

func (s *mapStore) Load(_ context.Context, r string) (epoch.Epoch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[r], nil
}

func (s *mapStore) Raise(_ context.Context, r string, ep epoch.Epoch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]epoch.Epoch{}
	}
	s.m[r] = ep
	return nil
}

// TestProxyRestartHolds: a proxy forwards an older epoch's request and
// "crashes" (its hold, in memory, is gone; the high-water mark, durable,
// is not) while the backend works on it. A proxy started over the same
// durable fence forwards a request under the epoch that was highest at
// once, but a newer epoch's only once the longest hold the previous
// process could have had has passed since it started: the backend is done
// with the older request by then.
func TestProxyRestartHolds(t *testing.T) {
	const (
		timeout = time.Second
		tb      = time.Second
		work    = 500 * time.Millisecond
	)
	acts := new(actLog)
	be := startContractBackend(t, acts, tb)
	store := new(mapStore)
	cfg := httpfence.ProxyConfig{Timeout: timeout, BackendTimeout: tb}
	first := storageguard.NewCached(store)
	t.Cleanup(func() { first.Close() })
	e1 := newPxEnvToOver(t, first, be.url(), cfg)
	older := async(func() pxResult {
		return e1.send("POST", "/acct", e1.token(t, 33, "node-a"), "X-Term", "33", "X-Work", work.String())
	})
	waitUntil(t, "the older request at the backend", func() bool { return be.got.Load() == 1 })
	// The restart: a second proxy over a fresh fence on the same store.
	// The first proxy's hold is invisible to it, as a crashed one's is.
	second := storageguard.NewCached(store)
	t.Cleanup(func() { second.Close() })
	e2 := newPxEnvToOver(t, second, be.url(), cfg)
	newer := async(func() pxResult { return e2.send("POST", "/acct", e1.token(t, 34, "node-b"), "X-Term", "34") })
	if r := recvWithin(t, newer, 2*(timeout+tb)+waitLimit, "the newer response"); r.status != 200 {
		t.Fatalf("newer request through the restarted proxy: %+v", r)
	}
	recvWithin(t, older, waitLimit, "the older response")
	waitUntil(t, "the backend to finish both requests", func() bool { return be.done.Load() == 2 })
	acts.check(t, false)
	t.Logf("acted on terms %v", acts.terms())
}

// TestProxyCanonicalPaths: a path-based Resource sees one spelling of each
// path: "//", "." and ".." segments and a trailing "/" are resolved before
// the mapping (and the backend is sent the same canonical path), and a
// path with no canonical form (an encoded '/', a ".." above the root) is
// refused with 400 and reaches neither the fence nor the backend.
func TestProxyCanonicalPaths(t *testing.T) {
	var paths sync.Map
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths.Store(r.URL.Path, true)
		io.WriteString(w, r.URL.Path)
	})
	e := newPxEnv(t, backend, httpfence.ProxyConfig{Resource: func(r *http.Request) string { return r.URL.Path }})
	if r := e.send("POST", "/acct//1", e.token(t, 6, "node-b")); r.status != 200 || r.body != "/acct/1" {
		t.Fatalf("epoch 6 on /acct//1: %+v, want the backend to get /acct/1", r)
	}
	for _, p := range []string{"/acct/1", "/acct//1", "/./acct/1", "/acct/x/../1", "/acct/1/", "//acct/1/."} {
		r := e.send("POST", p, e.token(t, 5, "node-a"))
		if r.status != http.StatusConflict || r.refusal.Code != "stale_epoch" || r.refusal.Resource != "/acct/1" {
			t.Errorf("epoch 5 on %q after epoch 6 wrote /acct/1: %+v, want 409 stale for /acct/1", p, r)
		}
	}
	calls := e.spy.Calls.Load()
	for _, p := range []string{"/acct%2F1", "/acct/%2e%2e/1", "/../acct/1", "/acct/%252F1", `/acct\1`} {
		r := e.send("POST", p, e.token(t, 7, "node-c"))
		if r.status != http.StatusBadRequest || r.refusal.Code != "bad_resource" {
			t.Errorf("%q: %+v, want 400 bad_resource", p, r)
		}
	}
	if n := e.spy.Calls.Load(); n != calls {
		t.Errorf("refused paths reached the fence (%d calls)", n-calls)
	}
	paths.Range(func(k, _ any) bool {
		if p := k.(string); p != "/acct/1" {
			t.Errorf("the backend was sent %q", p)
		}
		return true
	})
}

// waitUntil polls cond until it holds; the bound only turns a condition
// that never comes into a failure.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s never happened", what)
		}
		time.Sleep(time.Millisecond) // poll interval
	}
}

// TestProxyAnswerFirstBackendIsOutsideTheContract shows what the package
// doc says of a backend that answers before it acts (202 Accepted, then
// applies the write): its complete answer is taken for "done", the older
// epoch is released, and a newer epoch's request is forwarded while the
// backend still works on the older one. The backend here applies the older
// write only once the newer request arrived, so the wrong order is certain:
// the test checks that the proxy did not hold (it cannot know).
func TestProxyAnswerFirstBackendIsOutsideTheContract(t *testing.T) {
	acts := new(actLog)
	newerIn := make(chan struct{})
	var background sync.WaitGroup
	t.Cleanup(background.Wait)
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		term, _ := strconv.ParseUint(r.Header.Get("X-Term"), 10, 64)
		if term == 34 {
			acts.act(term, r.URL.Path, time.Now(), waitLimit)
			close(newerIn)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		background.Add(1)
		go func() {
			defer background.Done()
			select {
			case <-newerIn:
			case <-time.After(waitLimit):
			}
			acts.act(term, r.URL.Path, time.Now(), waitLimit)
		}()
	})
	e := newPxEnv(t, backend, httpfence.ProxyConfig{Timeout: waitLimit})
	if r := e.send("POST", "/acct", e.token(t, 33, "node-a"), "X-Term", "33"); r.status != http.StatusAccepted {
		t.Fatalf("older request: %+v", r)
	}
	if r := e.send("POST", "/acct", e.token(t, 34, "node-b"), "X-Term", "34"); r.status != 200 {
		t.Fatalf("newer request: %+v", r)
	}
	background.Wait()
	if got := acts.terms(); len(got) != 2 || got[0] != 34 || got[1] != 33 {
		t.Fatalf("acted on terms %v, want [34 33]: the proxy took the 202 for done, as documented", got)
	}
}
