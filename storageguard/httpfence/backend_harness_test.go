package httpfence_test

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/httpfence"
)

// The misbehaving-backend harness: the companion of TestClientHarness with
// the faults on the other side. Each round puts one older-epoch request
// (term 33) through a fault and a well-behaved successor (term 34) behind
// it, over a fresh proxy and a backend that keeps the contract
// (contractBackend). Faults, drawn at random with random timings:
//
//   - late-body: the older client pauses before its last body byte, up to
//     past the proxy's Timeout, while the successor waits at the fence;
//   - half-close: the backend ends its side of an upgraded connection and
//     still reads (and acts on) what the client sends after;
//   - answer-early: the backend answers at the header, before the body
//     arrived, and closes (it does not act on the body);
//   - backend-crash: the backend reads the request (acting on it or not),
//     resets the connection, and its listener is down for a while, then
//     back (a restart);
//   - proxy-restart: the proxy forwarding the older request is replaced by
//     a new process over the same durable fence while the backend works.
//
// Oracles: safety — the backend never acts on term 33 after term 34 for
// the resource (actLog); liveness — once the fault is over, the successor
// is answered 200 within the stated bound (Timeout + BackendTimeout +
// 100 ms, plus that again after a proxy restart); the bound checked is
// generous (twice that, plus 5 s, plus the backend's downtime), the waits
// measured are reported.
//
// Short by default (CI); TERMFENCE_HTTP_BACKEND_HARNESS=<duration> runs
// rounds for that long; TERMFENCE_HTTP_BACKEND_HARNESS_SEED pins the seed.

const (
	bhTimeout = 400 * time.Millisecond // the proxy's Timeout
	bhTB      = 300 * time.Millisecond // the backend's own timeout
)

var bhFaults = []string{"late-body", "half-close", "answer-early", "backend-crash", "proxy-restart"}

// bhResult is what one round measured.
type bhResult struct {
	fault string
	wait  time.Duration // successor: from sending to its 200
	acted []uint64
}

func TestBackendHarness(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("TERMFENCE_HTTP_BACKEND_HARNESS_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("TERMFENCE_HTTP_BACKEND_HARNESS_SEED: %v", err)
		}
		seed = s
	}
	var long time.Duration
	if v := os.Getenv("TERMFENCE_HTTP_BACKEND_HARNESS"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("TERMFENCE_HTTP_BACKEND_HARNESS: %v", err)
		}
		long = d
	}
	t.Logf("seed %d (TERMFENCE_HTTP_BACKEND_HARNESS_SEED=%d to repeat the choices)", seed, seed)
	var (
		mu      sync.Mutex
		results []bhResult
	)
	end := time.Now().Add(long)
	// Brief: every fault twice. Long: batches of every fault until the
	// duration is over.
	for batch := 0; batch < 2 || time.Now().Before(end); batch++ {
		ok := t.Run(fmt.Sprintf("batch-%d", batch), func(t *testing.T) {
			for i, fault := range bhFaults {
				rng := rand.New(rand.NewPCG(seed, uint64(batch*len(bhFaults)+i)))
				t.Run(fault, func(t *testing.T) {
					t.Parallel()
					r := bhRound(t, fault, rng)
					mu.Lock()
					results = append(results, r)
					mu.Unlock()
				})
			}
		})
		if !ok {
			break
		}
	}
	byFault := map[string][]time.Duration{}
	acted := map[string]int{}
	for _, r := range results {
		byFault[r.fault] = append(byFault[r.fault], r.wait)
		if slices.Contains(r.acted, 33) {
			acted[r.fault]++
		}
	}
	for _, f := range bhFaults {
		w := byFault[f]
		slices.Sort(w)
		if len(w) > 0 {
			t.Logf("%-13s rounds %3d, older acted on in %3d; successor wait p50 %v max %v", f, len(w), acted[f], w[len(w)/2].Round(time.Millisecond), w[len(w)-1].Round(time.Millisecond))
		}
	}
}

// bhRound runs one round of fault.
func bhRound(t *testing.T, fault string, rng *rand.Rand) bhResult {
	acts := new(actLog)
	be := startContractBackend(t, acts, bhTB)
	cfg := httpfence.ProxyConfig{Timeout: bhTimeout, BackendTimeout: bhTB}
	bound := bhTimeout + bhTB + 100*time.Millisecond
	work := time.Duration(rng.IntN(int(bhTB/time.Millisecond))) * time.Millisecond
	var fenceFirst storageguard.Fence // nil: a Memory fence
	store := new(mapStore)
	if fault == "proxy-restart" {
		c := storageguard.NewCached(store)
		t.Cleanup(func() { c.Close() })
		fenceFirst = c
		bound *= 2
	}
	e := newPxEnvToOver(t, fenceFirst, be.url(), cfg)
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
	tok33 := e.token(t, 33, "node-a")[0]
	successor := e // the proxy the successor goes through
	var downtime time.Duration
	var older sync.WaitGroup
	defer older.Wait()
	startOlder := func(f func(conn net.Conn)) {
		conn, err := net.Dial("tcp", e.proxy.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(waitLimit))
		older.Add(1)
		go func() {
			defer older.Done()
			defer conn.Close()
			f(conn)
		}()
	}
	head := func(method string, extra string) string {
		return fmt.Sprintf("%s /r HTTP/1.1\r\nHost: x\r\n%s: %s\r\nX-Term: 33\r\nX-Work: %v\r\n%s", method, epoch.Header, tok33, work, extra)
	}
	switch fault {
	case "late-body":
		pause := time.Duration(rng.IntN(int(bhTimeout*6/5/time.Millisecond))) * time.Millisecond
		startOlder(func(conn net.Conn) {
			io.WriteString(conn, head("POST", "Content-Length: 8\r\n\r\n1234567"))
			recv(t, at34, "the successor at the fence")
			pause := time.NewTimer(pause) // the client's pause: the fault itself
			<-pause.C
			io.WriteString(conn, "8")
			readAnswer(conn)
		})
	case "half-close":
		pause := time.Duration(rng.IntN(int(bhTimeout/2/time.Millisecond))) * time.Millisecond
		startOlder(func(conn net.Conn) {
			io.WriteString(conn, head("GET", "Connection: Upgrade\r\nUpgrade: echo\r\n\r\n"))
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
				return
			}
			io.WriteString(conn, "a\n")
			io.Copy(io.Discard, br) // the backend's end
			p := time.NewTimer(pause)
			<-p.C
			io.WriteString(conn, "b\n")
			conn.(*net.TCPConn).CloseWrite()
			io.Copy(io.Discard, br)
		})
	case "answer-early":
		startOlder(func(conn net.Conn) {
			io.WriteString(conn, head("POST", "X-Fault: answer-early\r\nContent-Length: 4000\r\n\r\n"+strings.Repeat("x", 1000)))
			recv(t, at34, "the successor at the fence")
			io.WriteString(conn, strings.Repeat("x", 3000))
			readAnswer(conn)
		})
	case "backend-crash":
		downtime = time.Duration(rng.IntN(int(bhTimeout/time.Millisecond))) * time.Millisecond
		actFirst := rng.IntN(2) == 0
		be.crash = func() (bool, time.Duration) { return actFirst, downtime }
		startOlder(func(conn net.Conn) {
			io.WriteString(conn, head("POST", "X-Fault: crash\r\nContent-Length: 3\r\n\r\nabc"))
			readAnswer(conn)
		})
	case "proxy-restart":
		startOlder(func(conn net.Conn) {
			io.WriteString(conn, head("POST", "Content-Length: 3\r\n\r\nabc"))
			readAnswer(conn)
		})
		waitUntil(t, "the older request at the backend", func() bool { return be.got.Load() >= 1 })
		second := storageguard.NewCached(store)
		t.Cleanup(func() { second.Close() })
		successor = newPxEnvToOver(t, second, be.url(), cfg)
	}
	recv(t, held33, "the older request admitted")
	start := time.Now()
	var r pxResult
	for {
		r = successor.send("POST", "/r", e.token(t, 34, "node-b"), "X-Term", "34")
		// A backend that is down answers 502 through the proxy: the
		// successor retries, as a leader would.
		if r.status != http.StatusBadGateway || time.Since(start) > 2*bound+downtime+5*time.Second {
			break
		}
		p := time.NewTimer(10 * time.Millisecond) // retry interval
		<-p.C
	}
	wait := time.Since(start)
	if r.status != 200 {
		t.Fatalf("%s: the successor got %+v after %v", fault, r, wait)
	}
	if limit := 2*bound + downtime + 5*time.Second; wait > limit {
		t.Errorf("%s: the successor waited %v, over %v (stated bound %v)", fault, wait, limit, bound)
	}
	older.Wait()
	waitUntil(t, "the backend to settle", func() bool { return be.got.Load() == be.done.Load() && be.upgraded.Load() == 0 })
	acts.check(t, true)
	return bhResult{fault: fault, wait: wait, acted: acts.terms()}
}

// readAnswer reads one response from conn, whatever it is, and returns
// (the proxy keeps the connection open for the next request).
func readAnswer(conn net.Conn) {
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// serveUpgrade is the contract backend's side of an upgraded connection:
// it reads a line, ends its side (a half-close) and goes on reading; on
// the next line it works, then acts on it within its timeout.
func (b *contractBackend) serveUpgrade(c net.Conn, rc *readClock, br *bufio.Reader, req *http.Request, term uint64) {
	b.upgraded.Add(1)
	defer b.upgraded.Add(-1)
	if _, err := io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n"); err != nil {
		return
	}
	if _, err := br.ReadString('\n'); err != nil {
		return
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	if _, err := br.ReadString('\n'); err != nil {
		return
	}
	arrival := rc.arrival()
	if w, err := time.ParseDuration(req.Header.Get("X-Work")); err == nil && w > 0 {
		t := time.NewTimer(w)
		<-t.C
	}
	b.log.act(term, req.URL.Path, arrival, b.tb)
}

// crashNow resets c and takes the listener down for the crash's
// downtime, then listens again on the same address (a restarted backend).
func (b *contractBackend) crashNow(c net.Conn, downtime time.Duration) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
	b.mu.Lock()
	addr := b.ln.Addr().String()
	b.ln.Close()
	b.mu.Unlock()
	p := time.NewTimer(downtime)
	<-p.C
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			b.mu.Lock()
			b.ln = ln
			closed := b.closed
			b.mu.Unlock()
			if closed {
				ln.Close()
				return
			}
			b.wg.Add(1)
			go b.accept()
			return
		}
		p := time.NewTimer(10 * time.Millisecond) // the port may linger a moment
		<-p.C
	}
}
