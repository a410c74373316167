package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// Scenario names, as in package results.
const (
	scenarioCrash    = "crash"
	scenarioHandover = "handover"
)

// electionPrefix is the key prefix all clients campaign on.
const electionPrefix = "/termfence-perf/election"

// benchConfig is one measurement.
type benchConfig struct {
	Endpoint   string
	Scenario   string // scenarioCrash or scenarioHandover
	Rounds     int
	Clients    int           // campaigners at the start of every round, >= 2
	TTL        int           // requested session TTL in seconds
	RoundLimit time.Duration // a round that has not failed over by then is an error
	Seed       uint64        // the crash-delay randomness
	Progress   func(round int, sample time.Duration)
}

// benchResult is what one measurement found.
type benchResult struct {
	Samples    []time.Duration
	GrantedTTL time.Duration // the TTL the server granted the sessions
	Leaders    []string      // who led after each round, for checks
	Retired    []string      // whom each round crashed or resigned
}

// member is one campaigning client with its own connection and lease.
type member struct {
	id   string
	cli  *clientv3.Client
	sess *concurrency.Session
	el   *concurrency.Election
}

// win is a Campaign that returned.
type win struct {
	m   *member
	at  time.Time
	err error
}

// bench runs cfg.Rounds rounds of cfg.Scenario against the server at
// cfg.Endpoint. It always closes every client it made before returning.
func bench(ctx context.Context, cfg benchConfig) (res benchResult, err error) {
	switch {
	case cfg.Scenario != scenarioCrash && cfg.Scenario != scenarioHandover:
		return res, fmt.Errorf("etcdfailover: unknown scenario %q", cfg.Scenario)
	case cfg.Rounds < 1:
		return res, errors.New("etcdfailover: rounds must be at least 1")
	case cfg.Clients < 2:
		return res, errors.New("etcdfailover: at least 2 clients")
	case cfg.TTL < 1:
		return res, errors.New("etcdfailover: TTL must be at least 1 s")
	case cfg.RoundLimit <= 0:
		return res, errors.New("etcdfailover: round limit must be positive")
	}
	ctx, cancel := context.WithCancel(ctx)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x7465726d66656e63))

	// One more client, never campaigning, watches the queue.
	obs, err := newClient(cfg.Endpoint)
	if err != nil {
		cancel()
		return res, err
	}

	wins := make(chan win)
	var wg sync.WaitGroup
	live := map[*member]bool{} // members whose client is still open
	defer func() {
		cancel() // unblocks every pending Campaign and every send on wins
		for m := range live {
			// Closing the session revokes the lease; this is cleanup, after
			// all measurements.
			_ = m.sess.Close()
			_ = m.cli.Close()
		}
		wg.Wait()
		_ = obs.Close()
	}()

	next := 0
	join := func() (*member, error) {
		next++
		m, err := newMember(ctx, cfg.Endpoint, fmt.Sprintf("c%d", next), cfg.TTL)
		if err != nil {
			return nil, err
		}
		live[m] = true
		wg.Go(func() {
			err := m.el.Campaign(ctx, m.id)
			w := win{m: m, at: time.Now(), err: err}
			select {
			case wins <- w:
			case <-ctx.Done():
			}
		})
		return m, nil
	}
	await := func() (win, error) {
		t := time.NewTimer(cfg.RoundLimit)
		defer t.Stop()
		select {
		case w := <-wins:
			if w.err != nil {
				return w, fmt.Errorf("etcdfailover: %s: campaign: %w", w.m.id, w.err)
			}
			return w, nil
		case <-t.C:
			return win{}, fmt.Errorf("etcdfailover: no leader within %v", cfg.RoundLimit)
		case <-ctx.Done():
			return win{}, ctx.Err()
		}
	}

	first, err := join()
	if err != nil {
		return res, err
	}
	ttl, err := obs.TimeToLive(ctx, first.sess.Lease())
	if err != nil {
		return res, fmt.Errorf("etcdfailover: lease TTL: %w", err)
	}
	res.GrantedTTL = time.Duration(ttl.GrantedTTL) * time.Second
	for range cfg.Clients - 1 {
		if _, err := join(); err != nil {
			return res, err
		}
	}
	w, err := await()
	if err != nil {
		return res, err
	}
	leader := w.m

	for round := range cfg.Rounds {
		if err := waitQueued(ctx, obs, cfg.Clients, cfg.RoundLimit); err != nil {
			return res, err
		}
		// The injected fault lands anywhere in the leader's keep-alive cycle.
		if err := pause(ctx, time.Duration(rng.Int64N(int64(res.GrantedTTL)))); err != nil {
			return res, err
		}

		t0 := time.Now()
		switch cfg.Scenario {
		case scenarioCrash:
			// A dead process: the connection goes, the lease stays until it
			// expires. No Resign, no Revoke.
			delete(live, leader)
			_ = leader.cli.Close()
		case scenarioHandover:
			if err := leader.el.Resign(ctx); err != nil {
				return res, fmt.Errorf("etcdfailover: %s: resign: %w", leader.id, err)
			}
		}
		w, err := await()
		if err != nil {
			return res, fmt.Errorf("etcdfailover: round %d: %w", round+1, err)
		}
		sample := w.at.Sub(t0)
		if w.m == leader {
			return res, fmt.Errorf("etcdfailover: round %d: %s won again after it was retired", round+1, leader.id)
		}
		res.Samples = append(res.Samples, sample)
		res.Retired = append(res.Retired, leader.id)
		res.Leaders = append(res.Leaders, w.m.id)
		if cfg.Progress != nil {
			cfg.Progress(round+1, sample)
		}

		if cfg.Scenario == scenarioHandover {
			delete(live, leader)
			_ = leader.sess.Close()
			_ = leader.cli.Close()
		}
		leader = w.m
		if _, err := join(); err != nil {
			return res, err
		}
	}
	return res, nil
}

func newClient(endpoint string) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcdfailover: client: %w", err)
	}
	return cli, nil
}

func newMember(ctx context.Context, endpoint, id string, ttl int) (*member, error) {
	cli, err := newClient(endpoint)
	if err != nil {
		return nil, err
	}
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl), concurrency.WithContext(ctx))
	if err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("etcdfailover: %s: session: %w", id, err)
	}
	return &member{id: id, cli: cli, sess: sess, el: concurrency.NewElection(sess, electionPrefix)}, nil
}

// waitQueued waits until want campaign keys exist, so that every round starts
// with the same queue.
func waitQueued(ctx context.Context, obs *clientv3.Client, want int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		resp, err := obs.Get(ctx, electionPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return fmt.Errorf("etcdfailover: queue: %w", err)
		}
		if resp.Count == int64(want) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcdfailover: %d campaigners queued after %v, want %d", resp.Count, limit, want)
		}
		if err := pause(ctx, 5*time.Millisecond); err != nil { // poll interval
			return err
		}
	}
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
