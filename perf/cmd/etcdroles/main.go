// Command etcdroles measures the etcd side of termfence's role failover
// figure (docs/PERFORMANCE.md, "Roles"): on a single-member embedded etcd,
// one client (the owner) wins k elections (concurrency.Election, one
// session with TTL = our role lease) while two other clients campaign for
// all k; the owner's client is then closed without revoking its lease (a
// crashed process), and the figure is the time until every one of the k
// elections has a new leader among the others. Each round uses fresh
// clients and election prefixes.
//
// Usage (from perf/): go run ./cmd/etcdroles [-n 20] [-k 1,100,3333] [-ttl 1] [-election-timeout 500]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/termfence/termfence/perf/internal/etcdserver"
)

func main() {
	n := flag.Int("n", 20, "rounds per k")
	ks := flag.String("k", "1,100,3333", "comma-separated numbers of elections the owner holds")
	ttl := flag.Int("ttl", 1, "session TTL in seconds (our role lease)")
	tick := flag.Uint("heartbeat-interval", 50, "etcd --heartbeat-interval in ms")
	elect := flag.Uint("election-timeout", 500, "etcd --election-timeout in ms (the minimum lease TTL is ceil(1.5 x this) s)")
	flag.Parse()
	ctx := context.Background()
	srv, err := etcdserver.Start(ctx, etcdserver.Config{TickMs: *tick, ElectionMs: *elect})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer srv.Close()
	fmt.Printf("etcd single member (embedded), heartbeat %dms, election %dms; session TTL %ds\n", *tick, *elect, *ttl)
	round := 0
	for _, f := range strings.Split(*ks, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 {
			fmt.Fprintf(os.Stderr, "bad -k %q\n", f)
			os.Exit(2)
		}
		var samples []time.Duration
		for range *n {
			round++
			d, err := once(ctx, srv.Endpoint, k, *ttl, round)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			samples = append(samples, d)
		}
		slices.Sort(samples)
		q := func(p float64) time.Duration { return samples[min(len(samples)-1, int(p*float64(len(samples))))] }
		fmt.Printf("etcd failover k=%d: n=%d p50=%v p99=%v min=%v max=%v\n", k, len(samples),
			q(0.5).Round(time.Millisecond), q(0.99).Round(time.Millisecond), samples[0].Round(time.Millisecond), samples[len(samples)-1].Round(time.Millisecond))
	}
}

func client(endpoint string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
}

// once runs one round: the owner wins k elections, two others queue on
// all of them, the owner's client closes, and the time until the others
// won all k is returned.
func once(ctx context.Context, endpoint string, k, ttl, round int) (time.Duration, error) {
	prefix := func(i int) string { return fmt.Sprintf("/termfence-perf/roles/%d/%d", round, i) }
	owner, err := client(endpoint)
	if err != nil {
		return 0, err
	}
	osess, err := concurrency.NewSession(owner, concurrency.WithTTL(ttl))
	if err != nil {
		return 0, err
	}
	for i := range k {
		if err := concurrency.NewElection(osess, prefix(i)).Campaign(ctx, "owner"); err != nil {
			return 0, err
		}
	}
	var won sync.WaitGroup
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	var mu sync.Mutex
	var firstErr error
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	taken := make([]sync.Once, k)
	won.Add(k)
	for w := range 2 {
		cli, err := client(endpoint)
		if err != nil {
			return 0, err
		}
		sess, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
		if err != nil {
			return 0, err
		}
		closers = append(closers, func() { _ = sess.Close(); _ = cli.Close() })
		for i := range k {
			go func() {
				err := concurrency.NewElection(sess, prefix(i)).Campaign(wctx, fmt.Sprintf("w%d", w))
				if err != nil {
					if wctx.Err() == nil {
						mu.Lock()
						firstErr = err
						mu.Unlock()
					}
					return
				}
				taken[i].Do(won.Done)
			}()
		}
	}
	// Let every campaign reach the server (queued behind the owner).
	time.Sleep(time.Duration(k/50+50) * time.Millisecond) // setup, outside the measured interval
	start := time.Now()
	_ = owner.Close() // a crash: the lease is not revoked, it expires
	done := make(chan struct{})
	go func() { won.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		return 0, fmt.Errorf("round %d: not every election had a new leader after a minute", round)
	}
	d := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	return d, firstErr
}
