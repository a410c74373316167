package httpfence_test

import (
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
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

// BenchmarkProxyOverhead measures, in one run, b.N requests sent straight to
// a loopback backend and b.N requests sent through a fencing proxy in front
// of it (Memory fence, HMAC tokens, the proxy's default transport), each by
// 64 concurrent clients under one epoch (and, for the hop's own latency, by
// one client). It reports both throughputs, their
// ratio (proxy/direct), both p50 latencies, the p50 and p99 the proxy adds,
// the process CPU time per request on each path (clients, proxy and backend
// all run in this process) and how many connections the backend accepted
// (every path; it stays flat when connections are reused).
//
// A third path, b.N requests more, goes through a splice: a forwarder that
// copies each client connection's bytes to a backend connection of its own
// and back, with no HTTP at all (it parses nothing, checks nothing, and
// could not fence). It is the floor for any proxy on this machine: the cost
// of one more loopback hop and its goroutine wake-ups, and the splice-*
// metrics say what the fencing proxy's targets would read if the proxy cost
// nothing more than that. The three paths alternate in rounds so that
// outside load hits them alike.
//
// The sub-benchmarks vary the backend's service time: an injected sleep
// standing for a resource that waits (disk, network), or about 100 µs of CPU
// work per request (hashing) standing for one that computes on the same
// cores. With one fixed sleep the 64 closed-loop clients can stay in
// lockstep, every request of a burst reaching the proxy at once; the
// "5-15ms" and "25-75ms" cases spread the sleeps evenly over the range
// instead, by request number, so that arrivals spread out while every path
// sees the same set of service times. There, request i of a round sleeps
// alike on every path, and added-paired-p50-us is the median of the
// per-request differences (proxied minus direct latency of the same i): the
// p50 of each path lands on a slope of the spread, where timer jitter moves
// it by tens of µs, while the paired difference cancels the sleep.
//
//	go test -run '^$' -bench ProxyOverhead -benchtime 20000x ./storageguard/
func BenchmarkProxyOverhead(b *testing.B) {
	for _, service := range []time.Duration{0, time.Millisecond, 10 * time.Millisecond} {
		b.Run(fmt.Sprintf("clients=64/backend=%v", service), func(b *testing.B) { benchProxyOverhead(b, 64, service, 0, false) })
	}
	b.Run("clients=64/backend=5-15ms", func(b *testing.B) { benchProxyOverhead(b, 64, 10*time.Millisecond, 0, true) })
	b.Run("clients=64/backend=25-75ms", func(b *testing.B) { benchProxyOverhead(b, 64, 50*time.Millisecond, 0, true) })
	b.Run("clients=64/backend=100µs-cpu", func(b *testing.B) { benchProxyOverhead(b, 64, 0, 100*time.Microsecond, false) })
	// One client at a time: the hop's own latency, without queueing for CPU.
	b.Run("clients=1/backend=0s", func(b *testing.B) { benchProxyOverhead(b, 1, 0, 0, false) })
}

// serviceHeader carries a request's backend sleep in the spread case.
const serviceHeader = "X-Bench-Service-Us"

// spreadService returns request i's backend sleep: mean evenly spread over
// [mean/2, 3*mean/2) by a fixed permutation of the request numbers.
func spreadService(mean time.Duration, i int) time.Duration {
	const steps = 1000
	k := (i * 617) % steps // 617 is prime to 1000: every step once per 1000
	return mean/2 + mean*time.Duration(k)/steps
}

// cpuWork returns a function that burns about d of CPU: SHA-256 rounds
// over a small buffer, their number measured once here.
func cpuWork(d time.Duration) func() {
	if d <= 0 {
		return func() {}
	}
	buf := make([]byte, 1024)
	round := func(n int) {
		for range n {
			sum := sha256.Sum256(buf)
			buf[0] ^= sum[0]
		}
	}
	const probe = 2000
	var best time.Duration
	for range 5 { // the fastest of a few probes: least disturbed
		t0 := time.Now()
		round(probe)
		if el := time.Since(t0); best == 0 || el < best {
			best = el
		}
	}
	n := max(1, int(int64(probe)*int64(d)/int64(best)))
	return func() { round(n) }
}

func benchProxyOverhead(b *testing.B, benchClients int, service, cpu time.Duration, spread bool) {
	work := cpuWork(cpu)
	backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if h := r.Header.Get(serviceHeader); h != "" {
			n, err := strconv.Atoi(h)
			if err != nil {
				http.Error(w, "bad "+serviceHeader, http.StatusBadRequest)
				return
			}
			time.Sleep(time.Duration(n) * time.Microsecond)
		} else if service > 0 {
			time.Sleep(service)
		}
		work()
		io.WriteString(w, "ok")
	}))
	var backendConns atomic.Int64 // connections the backend accepted
	backend.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			backendConns.Add(1)
		}
	}
	backend.Start()
	defer backend.Close()
	target, err := url.Parse(backend.URL)
	if err != nil {
		b.Fatal(err)
	}
	codec := gtCodec(b, gtKey)
	g := storageguard.NewGuard(storageguard.NewMemory(), storageguard.GuardConfig{Cluster: "payments", Verifier: codec})
	proxy := httptest.NewServer(httpfence.NewProxy(g, target, httpfence.ProxyConfig{}))
	defer proxy.Close()
	splice, err := startSplice(target.Host)
	if err != nil {
		b.Fatal(err)
	}
	defer splice.close()
	tok := gtSign(b, codec, gtEp(34, "node-b"))

	newClient := func() (*http.Client, func()) {
		tr := &http.Transport{MaxIdleConnsPerHost: 64, MaxIdleConns: 128}
		return &http.Client{Transport: tr}, tr.CloseIdleConnections
	}
	directClient, closeDirect := newClient()
	defer closeDirect()
	proxyClient, closeProxy := newClient()
	defer closeProxy()
	spliceClient, closeSplice := newClient()
	defer closeSplice()

	// Warm up: open the connections of every path.
	for _, p := range []struct {
		c   *http.Client
		url string
	}{{directClient, backend.URL}, {proxyClient, proxy.URL}, {spliceClient, splice.url()}} {
		if _, err := runLoad(p.c, p.url, tok, benchClients, 4*benchClients, nil); err != nil {
			b.Fatal(err)
		}
	}

	// Alternate the paths in rounds, so that load from outside the
	// benchmark hits them alike.
	const rounds = 10
	var direct, proxied, spliced loadResult
	var sleepOf func(i int) time.Duration
	if spread {
		sleepOf = func(i int) time.Duration { return spreadService(service, i) }
	}
	b.ResetTimer()
	for r := range rounds {
		n := b.N / rounds
		if r == rounds-1 {
			n = b.N - (rounds-1)*(b.N/rounds)
		}
		if n == 0 {
			continue
		}
		d, err := runLoad(directClient, backend.URL, tok, benchClients, n, sleepOf)
		if err != nil {
			b.Fatal(err)
		}
		p, err := runLoad(proxyClient, proxy.URL, tok, benchClients, n, sleepOf)
		if err != nil {
			b.Fatal(err)
		}
		sp, err := runLoad(spliceClient, splice.url(), tok, benchClients, n, sleepOf)
		if err != nil {
			b.Fatal(err)
		}
		direct.add(d)
		proxied.add(p)
		spliced.add(sp)
	}
	b.StopTimer()
	if spread {
		b.ReportMetric(us(pairedMedian(proxied.lat, direct.lat)), "added-paired-p50-us")
		b.ReportMetric(us(pairedMedian(spliced.lat, direct.lat)), "splice-added-paired-p50-us")
	}
	slices.Sort(direct.lat)
	slices.Sort(proxied.lat)
	slices.Sort(spliced.lat)

	b.ReportMetric(direct.rps(), "direct-req/s")
	b.ReportMetric(proxied.rps(), "proxy-req/s")
	b.ReportMetric(proxied.rps()/direct.rps(), "ratio")
	b.ReportMetric(us(direct.p(50)), "direct-p50-us")
	b.ReportMetric(us(proxied.p(50)), "proxy-p50-us")
	b.ReportMetric(us(proxied.p(50)-direct.p(50)), "added-p50-us")
	b.ReportMetric(us(proxied.p(99)-direct.p(99)), "added-p99-us")
	b.ReportMetric(us(direct.cpu)/float64(direct.n), "direct-cpu-us/req")
	b.ReportMetric(us(proxied.cpu)/float64(proxied.n), "proxy-cpu-us/req")
	b.ReportMetric(float64(backendConns.Load()), "backend-conns")
	b.ReportMetric(spliced.rps()/direct.rps(), "splice-ratio")
	b.ReportMetric(us(spliced.p(50)-direct.p(50)), "splice-added-p50-us")
	b.ReportMetric(us(spliced.cpu)/float64(spliced.n), "splice-cpu-us/req")
}

// pairedMedian returns the median of a[i]-b[i].
func pairedMedian(a, b []time.Duration) time.Duration {
	d := make([]time.Duration, len(a))
	for i := range a {
		d[i] = a[i] - b[i]
	}
	slices.Sort(d)
	return d[(len(d)-1)/2]
}

// startSplice starts the benchmark's floor: a TCP forwarder that gives each
// client connection a backend connection of its own and copies bytes both
// ways (io.Copy) without looking at them, until either side ends.
func startSplice(backend string) (*connServer, error) {
	return startConnServer(func(_ int, c net.Conn) {
		bc, err := net.Dial("tcp", backend)
		if err != nil {
			return
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = io.Copy(bc, c)
			bc.Close() // ends the copy below
		}()
		_, _ = io.Copy(c, bc)
		c.Close() // ends the copy above
		bc.Close()
		<-done
	})
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

type loadResult struct {
	n    int
	wall time.Duration
	cpu  time.Duration // this process's CPU time (user+system) meanwhile
	lat  []time.Duration
}

func (r *loadResult) add(o loadResult) {
	r.n += o.n
	r.wall += o.wall
	r.cpu += o.cpu
	r.lat = append(r.lat, o.lat...)
}

func (r loadResult) rps() float64 { return float64(r.n) / r.wall.Seconds() }

func (r loadResult) p(q int) time.Duration { return r.lat[(len(r.lat)-1)*q/100] }

// runLoad sends n POSTs to url from clients goroutines and returns the wall
// time, CPU time and every request's latency. sleepOf, if set, gives the
// backend sleep of request i (sent in serviceHeader).
func runLoad(c *http.Client, url, token string, clients, n int, sleepOf func(i int) time.Duration) (loadResult, error) {
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	start, cpu0 := time.Now(), cpuTime()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				req, _ := http.NewRequest("POST", url, strings.NewReader("payload of a write"))
				req.Header.Set(epoch.Header, token)
				if sleepOf != nil {
					req.Header.Set(serviceHeader, strconv.Itoa(int(sleepOf(i)/time.Microsecond)))
				}
				t0 := time.Now()
				resp, err := c.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %s", resp.Status)
					}
				}
				lat[i] = time.Since(t0)
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					next.Store(int64(n)) // stop everyone
					return
				}
			}
		}()
	}
	wg.Wait()
	wall, cpu := time.Since(start), cpuTime()-cpu0
	return loadResult{n: n, wall: wall, cpu: cpu, lat: lat}, firstErr
}
