package httpfence_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/httpfence"
)

// The randomized client-behaviour harness: careless and hostile
// clients — aborting at random points of the header and the body,
// trickling, never reading, upgrading, pipelining, resetting h2 streams —
// send requests of one epoch while a well-behaved successor sends the next
// epoch's, to a proxy (over its own transport and over http.Transport) and
// to a Middleware, each served over HTTP/1.1 and h2c. The backend records
// every request it acts on. Oracle:
//
//   - no request of an older epoch is acted on after a newer epoch's request
//     was admitted (held by the fence);
//   - the successor is admitted, and waits about the proxy's Timeout at most
//     (measured and reported; the bound checked is generous: 4×Timeout+5s).
//
// The backend behaves as the docs ask of one: it gives up on a request
// (does not act) once half the proxy's Timeout has passed since the client
// sent it, which is no earlier than its admission.
//
// Short by default (CI); TERMFENCE_HTTP_HARNESS=<duration> runs each front
// for that long; TERMFENCE_HTTP_HARNESS_SEED pins the seed.

const harnessTimeout = time.Second

// clientKind is one client behaviour.
type clientKind int

const (
	kNormal      clientKind = iota // h1 or h2c, full request, reads the answer
	kAbortHeader                   // h1: part of the header, then close
	kAbortBody                     // h1: header and part of the body, then close
	kTrickle                       // h1: the body a few bytes at a time
	kNeverRead                     // h1: asks for 1 MiB and never reads it
	kUpgrade                       // h1: upgrade, messages over the raw channel, then close
	kPipeline                      // h1: two or three requests back to back on one connection
	kH2Reset                       // h2c: header and part of the body, then RST_STREAM
	kNoToken                       // h1: an upgrade or a write without a token
	kGoneWaiting                   // h1 or h2c: the whole request, then gone before the answer
	numKinds
)

var kindNames = [...]string{"normal", "abort-header", "abort-body", "trickle", "never-read", "upgrade", "pipeline", "h2-reset", "no-token", "gone-waiting"}

func (k clientKind) String() string { return kindNames[k] }

// harness is one front under test with its recording backend.
type harness struct {
	t       *testing.T
	name    string
	front   string // http://host:port
	codec   epoch.Codec
	stats   *httpfence.ProxyStats // nil for Middleware
	h2c     *http.Client
	h1      *http.Client
	timeout time.Duration

	highestHeld atomic.Uint64 // the highest term the fence has held
	heldAt      sync.Map      // term -> time.Time the fence first held it
	raiseMu     sync.Mutex
	raised      chan struct{} // closed (and replaced) when highestHeld rises
	seq         atomic.Int64  // request ids
	arrived     sync.Map      // id -> chan struct{}, closed when the backend has the request

	mu        sync.Mutex
	findings  []string
	acts      int
	gaveUp    int
	requests  int
	waits     []time.Duration // successor: send to answer
	byKind    [numKinds]int
	succFails map[int]int // successor status other than 200
}

func (h *harness) finding(format string, a ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.findings) < 20 {
		h.findings = append(h.findings, fmt.Sprintf(format, a...))
	}
}

// ServeHTTP is the recording backend (behind the proxy) or the fenced
// handler (under Middleware). Headers: X-Term, the request's epoch term;
// X-Sent, when the client sent it (UnixNano); X-Mode, "headers" (act on the
// header, then drain the body) or "body" (act after reading all of it);
// X-Work, how long acting takes (ms); X-Size, the response size; X-Id, the
// request id.
func (h *harness) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	term, _ := strconv.ParseUint(r.Header.Get("X-Term"), 10, 64)
	giveUp := h.giveUp(r)
	if c, ok := h.arrived.Load(r.Header.Get("X-Id")); ok {
		closeOnce(c.(chan struct{}))
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(giveUp)
	_ = rc.SetWriteDeadline(giveUp)
	act := func(what string) bool {
		if !time.Now().Before(giveUp) {
			h.mu.Lock()
			h.gaveUp++
			h.mu.Unlock()
			return false
		}
		if held := h.highestHeld.Load(); held > term {
			h.finding("%s: the backend acted on a term-%d request (%s %s, %s) after term %d was admitted", h.name, term, r.Method, r.URL.Path, what, held)
		}
		h.mu.Lock()
		h.acts++
		h.mu.Unlock()
		return true
	}
	work, _ := strconv.Atoi(r.Header.Get("X-Work"))
	if r.Header.Get("Upgrade") == "echo" {
		conn, brw, err := switchProtocols(w, "echo")
		if err != nil {
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(giveUp)
		for {
			line, err := brw.ReadString('\n')
			if err != nil || !act("upgraded message") {
				return
			}
			brw.WriteString(line)
			brw.Flush()
		}
	}
	if r.Header.Get("X-Mode") == "body" {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return // a body cut off is not acted on
		}
	}
	if work > 0 {
		// Acting takes work ms, but a newer term held meanwhile makes it
		// act at once: a hold released too early shows as a finding
		// every time, not by chance.
		h.raiseMu.Lock()
		raised := h.raised
		h.raiseMu.Unlock()
		if h.highestHeld.Load() <= term {
			t := time.NewTimer(time.Duration(work) * time.Millisecond)
			select {
			case <-t.C:
			case <-raised:
				t.Stop()
			}
		}
	}
	if !act("request") {
		return
	}
	io.Copy(io.Discard, r.Body)
	size, _ := strconv.Atoi(r.Header.Get("X-Size"))
	w.Header().Set("Content-Length", strconv.Itoa(size))
	chunk := []byte(strings.Repeat("r", 32<<10))
	for size > 0 {
		n := min(size, len(chunk))
		if _, err := w.Write(chunk[:n]); err != nil {
			return
		}
		size -= n
	}
}

// errBody records whether reading the request body failed.
type errBody struct {
	r      io.Reader
	failed atomic.Bool
}

func (b *errBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.failed.Store(true)
	}
	return n, err
}

// giveUp is when the backend stops acting on r: half the Timeout after
// its admission. The request was admitted no earlier than it was sent, nor
// than the fence first held its term (a request waits at the fence for
// the older epoch's holds).
func (h *harness) giveUp(r *http.Request) time.Time {
	term, _ := strconv.ParseUint(r.Header.Get("X-Term"), 10, 64)
	sentNs, _ := strconv.ParseInt(r.Header.Get("X-Sent"), 10, 64)
	admitted := time.Unix(0, sentNs)
	if v, ok := h.heldAt.Load(term); ok && v.(time.Time).After(admitted) {
		admitted = v.(time.Time)
	}
	return admitted.Add(h.timeout / 2)
}

func closeOnce(c chan struct{}) {
	defer func() { _ = recover() }() // closed twice by a pipelined retry: harmless
	select {
	case <-c:
	default:
		close(c)
	}
}

// newHarness starts front kind ("proxy", "proxy/http.Transport",
// "middleware") over HTTP/1.1 and h2c.
func newHarness(t *testing.T, kind string) *harness {
	h := &harness{t: t, name: kind, codec: gtCodec(t, gtKey), timeout: harnessTimeout, succFails: map[int]int{}, raised: make(chan struct{})}
	spy := gtSpy()
	spy.OnHold = func(ep epoch.Epoch) {
		h.heldAt.LoadOrStore(ep.Term, time.Now())
		for {
			cur := h.highestHeld.Load()
			if ep.Term <= cur {
				return
			}
			if h.highestHeld.CompareAndSwap(cur, ep.Term) {
				h.raiseMu.Lock()
				close(h.raised)
				h.raised = make(chan struct{})
				h.raiseMu.Unlock()
				return
			}
		}
	}
	guard := storageguard.NewGuard(spy, storageguard.GuardConfig{Cluster: "payments", Verifier: h.codec})
	var handler http.Handler
	switch kind {
	case "middleware":
		// A Go service that calls its storage (the recording backend)
		// over HTTP with the request's context; upgrades it serves itself.
		backend := httptest.NewServer(h)
		t.Cleanup(backend.Close)
		down := &http.Transport{MaxIdleConnsPerHost: 64}
		t.Cleanup(down.CloseIdleConnections)
		handler = httpfence.Middleware(guard, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Upgrade") != "" {
				h.ServeHTTP(w, r)
				return
			}
			giveUp := h.giveUp(r)
			rc := http.NewResponseController(w)
			_ = rc.SetReadDeadline(giveUp)
			_ = rc.SetWriteDeadline(giveUp.Add(h.timeout / 4))
			ctx, cancel := context.WithDeadline(r.Context(), giveUp.Add(h.timeout/4))
			defer cancel()
			body := &errBody{r: r.Body}
			req, _ := http.NewRequestWithContext(ctx, r.Method, backend.URL+r.URL.Path, body)
			req.ContentLength = r.ContentLength
			for k, v := range r.Header {
				if strings.HasPrefix(k, "X-") {
					req.Header[k] = v
				}
			}
			resp, err := down.RoundTrip(req)
			if err != nil {
				w.WriteHeader(http.StatusBadGateway)
				if body.failed.Load() {
					// The client's body was cut off while it was being
					// sent to the storage, which may still act on what
					// it got: a correct handler waits until the
					// storage's own timeout has passed before it
					// returns and releases the hold, as the proxy does.
					// Middleware cannot know this; the handler must.
					// (Any other failure returns at once, as a typical
					// handler would.)
					pause(time.Until(giveUp.Add(h.timeout / 4)))
				}
				return
			}
			defer resp.Body.Close()
			w.WriteHeader(resp.StatusCode)
			if _, err := io.Copy(w, resp.Body); err != nil {
				io.Copy(io.Discard, resp.Body)
			}
		}))
	default:
		backend := httptest.NewServer(h)
		t.Cleanup(backend.Close)
		target, _ := url.Parse(backend.URL)
		h.stats = new(httpfence.ProxyStats)
		cfg := httpfence.ProxyConfig{Timeout: harnessTimeout, Stats: h.stats, ErrorLog: log.New(io.Discard, "", 0)}
		if kind == "proxy/http.Transport" {
			tr := &http.Transport{MaxIdleConnsPerHost: 64}
			t.Cleanup(tr.CloseIdleConnections)
			cfg.Transport = tr
		}
		handler = httpfence.NewProxy(guard, target, cfg)
	}
	srv := frontServer(t, handler)
	h.front = srv.URL
	h.h2c = h2cClient(t)
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	h.h1 = &http.Client{Transport: tr}
	return h
}

// header is the request header block (without the request line) for a
// request of term with the given extra fields.
func (h *harness) header(term uint64, id string, token bool, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Host: front\r\nX-Term: %d\r\nX-Sent: %d\r\nX-Id: %s\r\n", term, time.Now().UnixNano(), id)
	if token {
		fmt.Fprintf(&b, "%s: %s\r\n", epoch.Header, gtSign(h.t, h.codec, gtEp(term, fmt.Sprint("node-", term))))
	}
	for i := 0; i+1 < len(extra); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", extra[i], extra[i+1])
	}
	return b.String()
}

// newID returns a request id and the channel the backend closes when the
// request reaches it.
func (h *harness) newID() (string, chan struct{}) {
	id := strconv.FormatInt(h.seq.Add(1), 10)
	c := make(chan struct{})
	h.arrived.Store(id, c)
	return id, c
}

func (h *harness) dial() (net.Conn, error) {
	c, err := net.Dial("tcp", strings.TrimPrefix(h.front, "http://"))
	if err == nil {
		_ = c.SetDeadline(time.Now().Add(4*h.timeout + waitLimit))
	}
	return c, err
}

// waitArrival waits until the backend has request c, or up to d.
func waitArrival(c chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c:
	case <-t.C:
	}
}

func pause(d time.Duration) {
	if d > 0 {
		t := time.NewTimer(d)
		<-t.C
	}
}

// client runs one client of kind k with term, drawing its choices from rng.
// closeAfterArrival makes a client that goes away wait until the backend
// has its request first (as the reproductions in hold_test.go do).
func (h *harness) client(k clientKind, term uint64, rng *rand.Rand, closeAfterArrival bool) {
	h.mu.Lock()
	h.requests++
	h.byKind[k]++
	h.mu.Unlock()
	mode := [...]string{"headers", "body"}[rng.IntN(2)]
	work := strconv.Itoa(rng.IntN(int(h.timeout/time.Millisecond) / 2))
	if closeAfterArrival && rng.IntN(4) != 0 {
		// Mostly as in the reproductions: the backend acts on the header.
		mode = "headers"
	}
	id, arrived := h.newID()
	goneWait := func() {
		if closeAfterArrival {
			waitArrival(arrived, h.timeout)
		} else {
			pause(time.Duration(rng.IntN(int(h.timeout/time.Millisecond)/4)) * time.Millisecond)
		}
	}
	switch k {
	case kNormal:
		size := rng.IntN(64 << 10)
		req, _ := http.NewRequest(http.MethodPost, h.front+"/w", strings.NewReader(strings.Repeat("n", size)))
		for _, l := range strings.Split(strings.TrimSpace(h.header(term, id, true, "X-Mode", mode, "X-Work", work, "X-Size", strconv.Itoa(rng.IntN(128<<10)))), "\r\n") {
			k, v, _ := strings.Cut(l, ": ")
			if k != "Host" {
				req.Header.Set(k, v)
			}
		}
		c := h.h1
		if rng.IntN(2) == 0 {
			c = h.h2c
		}
		doRequest(c, req)
	case kAbortHeader, kAbortBody, kTrickle, kNeverRead, kGoneWaiting:
		conn, err := h.dial()
		if err != nil {
			return
		}
		defer conn.Close()
		size := 1 + rng.IntN(64<<10)
		respSize := 0
		if k == kNeverRead {
			respSize = 1 << 20
			conn.(*net.TCPConn).SetReadBuffer(1)
		}
		head := "POST /w HTTP/1.1\r\n" + h.header(term, id, true, "X-Mode", mode, "X-Work", work, "X-Size", strconv.Itoa(respSize)) + fmt.Sprintf("Content-Length: %d\r\n\r\n", size)
		switch k {
		case kAbortHeader:
			conn.Write([]byte(head[:rng.IntN(len(head))]))
			pause(time.Duration(rng.IntN(50)) * time.Millisecond)
		case kAbortBody:
			conn.Write([]byte(head + strings.Repeat("b", rng.IntN(size))))
			goneWait()
		case kGoneWaiting:
			conn.Write([]byte(head + strings.Repeat("b", size)))
			goneWait()
		case kTrickle:
			conn.Write([]byte(head))
			pieces := 2 + rng.IntN(8)
			for i := range pieces {
				n := size / pieces
				if i == pieces-1 {
					n = size - n*(pieces-1)
				}
				if _, err := conn.Write([]byte(strings.Repeat("t", n))); err != nil {
					return
				}
				pause(time.Duration(rng.IntN(int(h.timeout/time.Millisecond)/3)) * time.Millisecond)
			}
			io.Copy(io.Discard, conn)
		case kNeverRead:
			conn.Write([]byte(head + strings.Repeat("b", size)))
			pause(h.timeout + time.Duration(rng.IntN(int(h.timeout/time.Millisecond)))*time.Millisecond)
		}
	case kUpgrade:
		conn, err := h.dial()
		if err != nil {
			return
		}
		defer conn.Close()
		conn.Write([]byte("GET /u HTTP/1.1\r\n" + h.header(term, id, true, "Connection", "Upgrade", "Upgrade", "echo") + "\r\n"))
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			return
		}
		for range 1 + rng.IntN(4) {
			if _, err := conn.Write([]byte("m\n")); err != nil {
				return
			}
			if rng.IntN(2) == 0 {
				br.ReadString('\n')
			}
			pause(time.Duration(rng.IntN(int(h.timeout/time.Millisecond)/6)) * time.Millisecond)
		}
	case kPipeline:
		conn, err := h.dial()
		if err != nil {
			return
		}
		defer conn.Close()
		var b strings.Builder
		n := 2 + rng.IntN(2)
		for i := range n {
			pid, _ := h.newID()
			if i == 0 {
				pid = id
			}
			body := strings.Repeat("p", rng.IntN(4<<10))
			fmt.Fprintf(&b, "POST /p HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s", h.header(term, pid, true, "X-Mode", mode, "X-Work", work, "X-Size", "16"), len(body), body)
		}
		conn.Write([]byte(b.String()))
		if rng.IntN(3) == 0 {
			goneWait() // and go away with the pipeline in flight
			return
		}
		br := bufio.NewReader(conn)
		for range n {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	case kH2Reset:
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		size := 1 + rng.IntN(64<<10)
		pr, pw := io.Pipe()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.front+"/h2", pr)
		req.ContentLength = int64(size)
		for _, l := range strings.Split(strings.TrimSpace(h.header(term, id, true, "X-Mode", mode, "X-Work", work, "X-Size", "0")), "\r\n") {
			k, v, _ := strings.Cut(l, ": ")
			if k != "Host" {
				req.Header.Set(k, v)
			}
		}
		sent := rng.IntN(size)
		go func() {
			_, _ = pw.Write([]byte(strings.Repeat("h", sent)))
		}()
		res := async(func() pxResult { return doRequest(h.h2c, req) })
		goneWait()
		cancel()
		pw.CloseWithError(context.Canceled)
		<-res
	case kNoToken:
		conn, err := h.dial()
		if err != nil {
			return
		}
		defer conn.Close()
		req := "GET /u HTTP/1.1\r\n" + h.header(term, id, false, "Connection", "Upgrade", "Upgrade", "echo") + "\r\n"
		if rng.IntN(2) == 0 {
			req = "POST /w HTTP/1.1\r\n" + h.header(term, id, false, "X-Mode", mode) + "Content-Length: 0\r\n\r\n"
		}
		conn.Write([]byte(req))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err == nil && resp.StatusCode != http.StatusUnauthorized {
			h.finding("%s: a request without a token got %d, want 401", h.name, resp.StatusCode)
		}
	}
}

// successor sends a well-behaved request of term and records how long it
// took to be answered.
func (h *harness) successor(term uint64, rng *rand.Rand) {
	id, _ := h.newID()
	req, _ := http.NewRequest(http.MethodPost, h.front+"/s", strings.NewReader("successor"))
	for _, l := range strings.Split(strings.TrimSpace(h.header(term, id, true, "X-Mode", "body", "X-Work", "0", "X-Size", "2")), "\r\n") {
		k, v, _ := strings.Cut(l, ": ")
		if k != "Host" {
			req.Header.Set(k, v)
		}
	}
	c := h.h1
	if rng.IntN(2) == 0 {
		c = h.h2c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*h.timeout+5*time.Second)
	defer cancel()
	start := time.Now()
	r := doRequest(c, req.WithContext(ctx))
	took := time.Since(start)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.requests++
	switch {
	case r.err != nil:
		h.findings = append(h.findings, fmt.Sprintf("%s: the term-%d successor got no answer within %v: %v", h.name, term, took.Round(time.Millisecond), r.err))
	case r.status == http.StatusOK:
		h.waits = append(h.waits, took)
	case r.status == http.StatusConflict || r.status == http.StatusUnauthorized || r.status == http.StatusForbidden:
		h.findings = append(h.findings, fmt.Sprintf("%s: the term-%d successor was refused: %d %s", h.name, term, r.status, r.body))
	default:
		h.succFails[r.status]++ // the backend gave up under load: reported
	}
}

// run runs rounds until deadline (at least minRounds). Round i: a few
// clients of term base+i, then, after a random pause, the successor of
// term base+i+1; then it waits for all of them.
func (h *harness) run(seed uint64, minRounds int, deadline time.Time) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	term := uint64(10)
	for round := 0; round < minRounds || time.Now().Before(deadline); round++ {
		var kinds []clientKind
		closeAfter := false
		switch round {
		case 0: // the reproductions first: gone after the backend has the request
			kinds, closeAfter = []clientKind{kAbortBody}, true
		case 1:
			kinds, closeAfter = []clientKind{kH2Reset}, true
		case 2: // and a client gone while waiting for the answer
			kinds, closeAfter = []clientKind{kGoneWaiting}, true
		default:
			for range 1 + rng.IntN(5) {
				kinds = append(kinds, clientKind(rng.IntN(int(numKinds))))
			}
			closeAfter = rng.IntN(2) == 0
		}
		var wg sync.WaitGroup
		for _, k := range kinds {
			crng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
			wg.Go(func() { h.client(k, term, crng, closeAfter) })
		}
		pause(time.Duration(rng.IntN(int(h.timeout/time.Millisecond)/4)) * time.Millisecond)
		srng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		h.successor(term+1, srng)
		wg.Wait()
		term++
	}
}

func harnessSeed(t *testing.T) uint64 {
	if s := os.Getenv("TERMFENCE_HTTP_HARNESS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("TERMFENCE_HTTP_HARNESS_SEED: %v", err)
		}
		return v
	}
	return uint64(time.Now().UnixNano())
}

func TestClientHarness(t *testing.T) {
	seed := harnessSeed(t)
	minRounds, long := 6, time.Duration(0)
	if v := os.Getenv("TERMFENCE_HTTP_HARNESS"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("TERMFENCE_HTTP_HARNESS: %v", err)
		}
		long = d
	}
	t.Logf("seed %d (TERMFENCE_HTTP_HARNESS_SEED=%d to repeat the choices)", seed, seed)
	for i, kind := range []string{"proxy", "proxy/http.Transport", "middleware"} {
		t.Run(strings.ReplaceAll(kind, "/", " over "), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, kind)
			h.run(seed+uint64(i), minRounds, time.Now().Add(long))
			h.report(t)
		})
	}
}

func (h *harness) report(t *testing.T) {
	h.mu.Lock()
	defer h.mu.Unlock()
	slices.Sort(h.waits)
	var maxWait, p50 time.Duration
	if n := len(h.waits); n > 0 {
		maxWait, p50 = h.waits[n-1], h.waits[n/2]
	}
	var held, cut uint64
	if h.stats != nil {
		held, cut = h.stats.Held(), h.stats.TimedOut()
	}
	var kinds []string
	for k, n := range h.byKind {
		kinds = append(kinds, fmt.Sprintf("%s %d", clientKind(k), n))
	}
	t.Logf("%s: %d requests (%s), %d acts (requests and upgraded messages), %d given up by the backend, %d successors answered (p50 %v, max %v, Timeout %v), held to the timeout %d, cut %d, successor non-200 %v, findings %d",
		h.name, h.requests, strings.Join(kinds, ", "), h.acts, h.gaveUp, len(h.waits), p50.Round(time.Millisecond), maxWait.Round(time.Millisecond), h.timeout, held, cut, h.succFails, len(h.findings))
	for _, f := range h.findings {
		t.Error(f)
	}
	if bound := 4*h.timeout + 5*time.Second; maxWait > bound {
		t.Errorf("%s: a successor waited %v, more than %v", h.name, maxWait, bound)
	}
}
