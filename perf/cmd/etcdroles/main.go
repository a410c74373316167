// Command etcdroles measures the etcd side of termfence's role failover
// figure (docs/PERFORMANCE.md, "Roles"): on a single-member embedded etcd,
// one client (the owner) wins k elections (concurrency.Election, one
// session with TTL = our role lease) while two other clients campaign for
// all k; once every one of the 3k campaign keys is on the server, the
// owner's client is closed without revoking its lease (a crashed process),
// and the figure is the time until every one of the k elections has a new
// leader among the others. Each round uses fresh clients and election
// prefixes.
//
// Only the owner's session has the measured TTL. The two contenders'
// sessions have a long one (-contender-ttl): while thousands of campaigns
// are being set up on a loaded machine a keep-alive can be late, and a
// contender whose lease expired then fails with "requested lease not found"
// — a failure of the setup, not of the measured failover. Campaigns start
// in batches (-batch), each batch once the previous one's keys are on the
// server. A round whose owner lease expired before the kill is run again,
// and counted.
//
// Usage (from perf/): go run ./cmd/etcdroles [-n 20] [-k 1,100,3333] [-ttl 1] [-election-timeout 500]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
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
	ttl := flag.Int("ttl", 1, "the owner's session TTL in seconds (our role lease)")
	cttl := flag.Int("contender-ttl", 60, "the contenders' session TTL in seconds (long: not measured)")
	batch := flag.Int("batch", 200, "campaigns started at once")
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
		again := 0
		for len(samples) < *n {
			round++
			d, err := once(ctx, srv.Endpoint, setup{k: k, ttl: *ttl, contenderTTL: *cttl, batch: *batch, round: round})
			if errors.Is(err, errOwnerLost) && again < *n {
				again++
				fmt.Fprintf(os.Stderr, "k=%d round %d: %v; again\n", k, round, err)
				continue
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			samples = append(samples, d)
		}
		slices.Sort(samples)
		q := func(p float64) time.Duration { return samples[min(len(samples)-1, int(p*float64(len(samples))))] }
		fmt.Printf("etcd failover k=%d: n=%d p50=%v p99=%v min=%v max=%v (rounds run again: %d)\n", k, len(samples),
			q(0.5).Round(time.Millisecond), q(0.99).Round(time.Millisecond), samples[0].Round(time.Millisecond), samples[len(samples)-1].Round(time.Millisecond), again)
	}
}

func client(endpoint string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
}

// setup is one round's parameters.
type setup struct {
	k, ttl, contenderTTL, batch, round int
}

// errOwnerLost: the owner's lease expired before the kill (a keep-alive
// late on a loaded machine): the round measures nothing and runs again.
var errOwnerLost = errors.New("the owner's session ended before the kill")

// once runs one round: the owner wins k elections, two others queue on
// all of them, the owner's client closes, and the time until the others
// won all k is returned.
func once(ctx context.Context, endpoint string, st setup) (time.Duration, error) {
	root := fmt.Sprintf("/termfence-perf/roles/%d/", st.round)
	prefix := func(i int) string { return fmt.Sprintf("%s%d", root, i) }
	owner, err := client(endpoint)
	if err != nil {
		return 0, err
	}
	ownerClosed := false
	defer func() {
		if !ownerClosed {
			_ = owner.Close()
		}
	}()
	osess, err := concurrency.NewSession(owner, concurrency.WithTTL(st.ttl))
	if err != nil {
		return 0, err
	}
	// The owner wins all k, a batch at a time (each Campaign returns at once:
	// its key is the first of its election).
	for lo := 0; lo < st.k; lo += st.batch {
		hi := min(lo+st.batch, st.k)
		errs := make(chan error, hi-lo)
		for i := lo; i < hi; i++ {
			go func() { errs <- concurrency.NewElection(osess, prefix(i)).Campaign(ctx, "owner") }()
		}
		for range hi - lo {
			if err := <-errs; err != nil {
				return 0, ownerErr(osess, fmt.Errorf("round %d: owner campaign: %w", st.round, err))
			}
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
	taken := make([]sync.Once, st.k)
	won.Add(st.k)
	var sessions []*concurrency.Session
	for range 2 {
		cli, err := client(endpoint)
		if err != nil {
			return 0, err
		}
		sess, err := concurrency.NewSession(cli, concurrency.WithTTL(st.contenderTTL))
		if err != nil {
			_ = cli.Close()
			return 0, err
		}
		closers = append(closers, func() { _ = sess.Close(); _ = cli.Close() })
		sessions = append(sessions, sess)
	}
	// The contenders queue on all k, a batch at a time: each batch once the
	// previous one's keys are on the server.
	for lo := 0; lo < st.k; lo += st.batch {
		hi := min(lo+st.batch, st.k)
		for w, sess := range sessions {
			for i := lo; i < hi; i++ {
				go func() {
					err := concurrency.NewElection(sess, prefix(i)).Campaign(wctx, fmt.Sprintf("w%d", w))
					if err != nil {
						if wctx.Err() == nil {
							mu.Lock()
							if firstErr == nil {
								firstErr = err
							}
							mu.Unlock()
						}
						return
					}
					taken[i].Do(won.Done)
				}()
			}
		}
		if err := waitKeys(ctx, owner, osess.Done(), root, st.k+2*hi); err != nil {
			return 0, ownerErr(osess, fmt.Errorf("round %d: %w", st.round, err))
		}
		mu.Lock()
		err := firstErr
		mu.Unlock()
		if err != nil {
			return 0, fmt.Errorf("round %d: contender campaign before the kill: %w", st.round, err)
		}
	}
	// The kill falls anywhere in the keep-alive cycle (as etcdfailover's
	// crash does): without it, it would come at one phase of the owner's
	// keep-alives, the one the setup's length happened to leave.
	time.Sleep(rand.N(time.Duration(st.ttl) * time.Second))
	select {
	case <-osess.Done():
		return 0, errOwnerLost
	default:
	}
	start := time.Now()
	ownerClosed = true
	_ = owner.Close() // a crash: the lease is not revoked, it expires
	done := make(chan struct{})
	go func() { won.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		return 0, fmt.Errorf("round %d: not every election had a new leader after a minute", st.round)
	}
	d := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	return d, firstErr
}

// waitKeys polls until the server holds n keys under root; it gives up
// with errOwnerLost when lost is closed.
func waitKeys(ctx context.Context, cli *clientv3.Client, lost <-chan struct{}, root string, n int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		select {
		case <-lost:
			return errOwnerLost
		default:
		}
		resp, err := cli.Get(ctx, root, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return fmt.Errorf("counting campaign keys: %w", err)
		}
		if resp.Count == int64(n) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d campaign keys on the server after 2 minutes, want %d", resp.Count, n)
		}
		time.Sleep(20 * time.Millisecond) // poll interval, before the measured interval
	}
}

// ownerErr is err, or errOwnerLost if the owner's session has ended (its
// lease expired during the setup).
func ownerErr(osess *concurrency.Session, err error) error {
	select {
	case <-osess.Done():
		return fmt.Errorf("%w (%v)", errOwnerLost, err)
	default:
		return err
	}
}
