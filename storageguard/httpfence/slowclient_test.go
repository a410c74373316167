package httpfence_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard/httpfence"
)

// slowClient is one of the two ways an older epoch's client can hold its
// admission at the proxy: trickle its body, or not read the response.
type slowClient int

const (
	trickler  slowClient = iota // sends a 60-byte body one byte per 200 ms
	nonReader                   // asks for 64 MiB and never reads it
)

func (s slowClient) String() string { return [...]string{"trickled body", "non-reading client"}[s] }

// slowRun is the outcome of one slow-client scenario.
type slowRun struct {
	// sinceOld is the time from the older request's hold at the fence (the
	// fence runs its write) to the newer epoch's response.
	sinceOld time.Duration
	// cutBeforeNewer: the proxy had counted the older request as cut off
	// when the newer one reached the backend.
	cutBeforeNewer bool
	newStatus      int
}

// runSlowClient admits an epoch-33 request from a slow client of kind s
// through a proxy with the given timeout, then sends an epoch-34 request
// and waits for its answer.
func runSlowClient(t testing.TB, s slowClient, std bool, timeout time.Duration) slowRun {
	stats := new(httpfence.ProxyStats)
	oldIn := make(chan time.Time, 1)
	var cutSeen atomic.Bool
	var held sync.Once
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("X-Req") {
		case "old":
			if s == trickler {
				io.Copy(io.Discard, r.Body) // fails when the proxy cuts the request
				return
			}
			w.Header().Set("Content-Length", fmt.Sprint(64<<20))
			chunk := []byte(strings.Repeat("o", 64<<10))
			for range 1024 {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		case "new":
			cutSeen.Store(stats.TimedOut() > 0)
			io.WriteString(w, "new")
		}
	})
	var cfg httpfence.ProxyConfig
	if tb, ok := t.(*testing.T); ok {
		cfg = pxConfig(tb, std, httpfence.ProxyConfig{})
	}
	cfg.Timeout, cfg.Stats = timeout, stats
	e := newPxEnvOver(t, nil, backend, cfg)
	// The older epoch admitted and held (its admission alone is not
	// enough: a newer raise may get in between the older one's raise and
	// its hold, and the older request is then refused as stale, not held).
	e.spy.OnHold = func(ep epoch.Epoch) {
		if ep.Term == 33 {
			held.Do(func() { oldIn <- time.Now() })
		}
	}
	conn, err := net.Dial("tcp", e.proxy.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if s == nonReader {
		// The smallest receive buffer the kernel allows: the client stops
		// taking data at once.
		conn.(*net.TCPConn).SetReadBuffer(1)
	}
	body := ""
	if s == trickler {
		body = "Content-Length: 60\r\n"
	} else {
		body = "Content-Length: 0\r\n"
	}
	fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: x\r\nX-Req: old\r\n%s: %s\r\n%s\r\n", "Fencing-Token", e.token(t, 33, "node-a")[0], body)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	if s == trickler {
		// The injected fault: one byte every 200 ms, 12 s in all.
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for range 60 {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				if _, err := conn.Write([]byte("x")); err != nil {
					return
				}
			}
		}()
	}
	var admitted time.Time
	select {
	case admitted = <-oldIn:
	case <-time.After(waitLimit):
		t.Fatal("the older request was never held at the fence")
	}
	// Bounded, so that a proxy that lets the slow client hold the resource
	// (no deadline on the client's connection) fails here, within seconds,
	// rather than hanging until the test binary's timeout.
	ctx, cancel := context.WithTimeout(context.Background(), slowLimit(timeout))
	defer cancel()
	r := e.sendCtx(ctx, "POST", "/", e.token(t, 34, "node-b"), "X-Req", "new")
	if r.err != nil {
		t.Fatalf("the newer epoch's request got no answer within %v of the older one's admission (%v): the %s held the resource; does the proxy set deadlines on the client's connection?", time.Since(admitted).Round(time.Millisecond), r.err, s)
	}
	return slowRun{sinceOld: time.Since(admitted), cutBeforeNewer: cutSeen.Load(), newStatus: r.status}
}

// slowLimit is how long after the older slow request's admission the newer
// epoch's answer may come at the latest: ten times the target (the timeout
// plus 200 ms), which no load makes a correct proxy miss.
func slowLimit(timeout time.Duration) time.Duration { return 10 * (timeout + 200*time.Millisecond) }

// TestProxySlowClientIsCut: an older epoch's client that trickles its body,
// or does not read a large response, is cut off at ProxyConfig.Timeout; the
// cut is counted before the newer epoch's request reaches the backend, and
// the newer epoch is delayed by about the timeout, not by the slow client.
// (The delay is measured by BenchmarkProxySlowClient; the bound here is ten
// times the target, which no load makes a correct proxy miss, while the old
// proxy held the trickled request for 12 s and the non-reader for good.)
func TestProxySlowClientIsCut(t *testing.T) {
	const timeout = 300 * time.Millisecond
	for _, s := range []slowClient{trickler, nonReader} {
		t.Run(s.String(), func(t *testing.T) {
			eachTransport(t, func(t *testing.T, std bool) {
				run := runSlowClient(t, s, std, timeout)
				if run.newStatus != 200 {
					t.Fatalf("the newer epoch's request: status %d", run.newStatus)
				}
				if limit := slowLimit(timeout); run.sinceOld > limit {
					t.Fatalf("the newer epoch was answered %v after the older request was admitted, more than %v: the slow client held the resource", run.sinceOld, limit)
				}
				if !run.cutBeforeNewer {
					t.Fatal("the newer epoch reached the backend before the proxy counted the older request as cut off")
				}
			})
		})
	}
}

// BenchmarkProxySlowClient measures, with ProxyConfig.Timeout 1 s, how long
// after an older epoch's slow client was admitted a newer epoch's request
// is answered: "ms-past-timeout" is that time minus the timeout (target:
// at most 200). Each iteration takes about a second; run it with
// -benchtime=5x.
func BenchmarkProxySlowClient(b *testing.B) {
	for _, s := range []slowClient{trickler, nonReader} {
		b.Run(strings.ReplaceAll(s.String(), " ", "-"), func(b *testing.B) {
			var worst, sum time.Duration
			for i := 0; i < b.N; i++ {
				run := runSlowClient(b, s, false, time.Second)
				if run.newStatus != 200 || !run.cutBeforeNewer {
					b.Fatalf("run %d: %+v", i, run)
				}
				past := run.sinceOld - time.Second
				sum += past
				worst = max(worst, past)
			}
			b.ReportMetric(float64(sum.Milliseconds())/float64(b.N), "ms-past-timeout")
			b.ReportMetric(float64(worst.Milliseconds()), "worst-ms-past-timeout")
		})
	}
}
