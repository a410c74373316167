package main

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/internal/redisserver"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/redisfence"
)

// The keys of the redis scenario: one hash tag, so that they would share
// a slot on a Redis Cluster too.
const (
	redisFence = "{account}:fence"
	redisData  = "{account}:balance"
)

// runRedis is the paused-leader story with the fence inside Redis (a real
// redis-server on loopback): A writes through the fence library, reads the
// value for its next write, and pauses. B is elected in a higher term and
// writes through the library. A wakes and sends its write: the library,
// inside Redis, verifies A's token, finds B's newer epoch on the fence key
// and refuses it, in the same atomic step in which it would have written.
// A write with a forged token (a huge term, signed with a guessed key) is
// refused too. With -unfenced A writes with a plain SET: it lands and B's
// update is lost.
func runRedis(ctx context.Context, e *env) (*summary, error) {
	srv, err := redisserver.Start(ctx, filepath.Join(e.dir, "redis"))
	if err != nil {
		return nil, failf("the redis scenario needs redis-server (apt-get install redis-server): %v", err)
	}
	defer srv.Kill()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DisableIdentity: true})
	defer rdb.Close()
	if err := redisfence.Install(ctx, rdb, redisfence.Config{Cluster: "demo", HMACKey: e.key}); err != nil {
		return nil, err
	}
	f, err := redisfence.Open(ctx, rdb, redisfence.Options{})
	if err != nil {
		return nil, err
	}
	if err := e.startNodes(); err != nil {
		return nil, err
	}
	mode := "Redis WITH the fence inside it (redisfence: token checked by a Redis function, in the write's atomic step)"
	if e.opts.unfenced {
		mode = "Redis WITHOUT fencing (-unfenced: A writes with a plain SET)"
	}
	e.header(mode)
	e.tl.print("  redis-server at %s (appendonly yes, appendfsync always), fence key %q, data %q", srv.Addr, redisFence, redisData)

	var (
		snap             string
		refused, forgedR int
	)
	write := func(ctx context.Context, tok, v string) error {
		_, err := f.Do(ctx, redisFence, tok, []string{redisData}, redisfence.Cmd{"SET", redisData, v})
		return err
	}
	run, err := e.runScript(ctx, pauseScript{
		before: func(ctx context.Context, a *actor) error {
			if err := write(ctx, a.tok, "v0"); err != nil {
				return err
			}
			e.tl.say(a.who(), "FCALL termfence_write under %s: SET %s -> OK", a.ep, data("v0"))
			v, err := rdb.Get(ctx, redisData).Result()
			if err != nil {
				return err
			}
			snap = v
			e.tl.say(a.who(), "reads %s and is about to write %s — the pause strikes", data(snap), data(snap+" A"))
			return nil
		},
		asB: func(ctx context.Context, b *actor) error {
			v, err := rdb.Get(ctx, redisData).Result()
			if err != nil {
				return err
			}
			if err := write(ctx, b.tok, v+" B"); err != nil {
				return failf("the new leader's write failed: %v", err)
			}
			e.tl.say(b.who(), "reads %s, FCALL termfence_write under %s: SET %s -> OK (the fence key rises to %s)", data(v), b.ep, data(v+" B"), b.ep)
			return nil
		},
		after: func(ctx context.Context, a *actor) error {
			if e.opts.unfenced {
				if err := rdb.Set(ctx, redisData, snap+" A", 0).Err(); err != nil {
					return err
				}
				e.tl.say(a.who(), "wakes, SET %s (plain SET, no token) -> OK", data(snap+" A"))
				return nil
			}
			err := write(ctx, a.tok, snap+" A")
			if err == nil {
				e.tl.say(a.who(), "wakes, FCALL termfence_write under %s -> OK (the fence FAILED)", a.ep)
				return nil
			}
			if !errors.Is(err, storageguard.ErrStale) {
				return failf("A's late write: %v", err)
			}
			refused++
			e.tl.say(a.who(), "wakes, FCALL termfence_write under %s -> REFUSED by Redis itself (%v)", a.ep, err)
			// A forger without the key: a term far above every real one.
			guess, err := epoch.NewHMAC([]byte("a-guess-at-the-key-of-32-bytes!!"))
			if err != nil {
				return err
			}
			forged, err := guess.Sign(epoch.Epoch{Cluster: a.ep.Cluster, Term: epoch.MaxTerm, Leader: "mallory"})
			if err != nil {
				return err
			}
			err = write(ctx, forged, "forged")
			if !errors.Is(err, storageguard.ErrUnauthenticated) {
				return failf("a forged token's write: %v", err)
			}
			forgedR++
			e.tl.say("forger", "FCALL termfence_write with a forged token (term %d) -> REFUSED (%v)", epoch.MaxTerm, err)
			return nil
		},
	})
	if err != nil {
		return nil, err
	}
	value, err := rdb.Get(ctx, redisData).Result()
	if err != nil {
		return nil, err
	}
	h, err := f.Highest(ctx, redisFence)
	if err != nil {
		return nil, err
	}
	lost := 0
	verdict := "B's update survives"
	if !slices.Contains(strings.Fields(value), "B") {
		lost = 1
		verdict = "B's update is LOST"
	}
	e.tl.say("result", "%s = %s, fence key at %s  %s", redisData, data(value), h, verdict)
	sum := newSummary("redis").
		add("fenced", !e.opts.unfenced).
		add("A", run.a.n.id).add("epochA", run.a.ep).
		add("B", run.b.n.id).add("epochB", run.b.ep).
		add("pause", ms(run.pause)).add("lease", ms(e.lease())).
		add("refused", refused).add("forged_refused", forgedR).add("lost", lost).
		add("data", list(value))
	sum.ok = lost == 0
	return sum, nil
}
