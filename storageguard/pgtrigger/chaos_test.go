package pgtrigger_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/internal/pgtest"
	"github.com/termfence/termfence/storageguard/pgfence"
	"github.com/termfence/termfence/storageguard/pgtrigger"
	"github.com/termfence/termfence/storageguard/sqlfence"
)

// chaosEnv sets the long run of TestPostgresChaos: a duration ("5m").
const chaosEnv = "TERMFENCE_PG_CHAOS"

// TestPostgresChaos is a randomized harness over a server of its own:
// writers through sqlfence's Tx, pgfence's TxWith (a random isolation
// level) and the guard (plain transactions presenting a token), on
// sessions whose synchronous_commit is randomly off or on, each write
// under the current epoch or the one before (a deposed leader), each
// transaction holding its locks for a random short while (lock waits);
// a leader that raises the epoch through a random fence; and crashes of
// the whole server (every process killed at once) followed by restarts.
// Its oracle:
//
//   - never an older epoch after a newer one: every committed write takes
//     the next number of a counter row as its last statement, so the
//     numbers are the commit order, and per resource the terms never go
//     down along it;
//   - no acknowledged raise lost: after every restart each resource's
//     fence row is at least the highest raise acknowledged before the
//     crash;
//   - every raise served: each raise returns within raiseBound of its
//     first call, crashes aside (an attempt cut by a crash is retried and
//     the clock starts again once the server answers).
//
// The brief run (every go test) lasts chaosBrief with two crashes; set
// TERMFENCE_PG_CHAOS to a duration for a long one.
func TestPostgresChaos(t *testing.T) {
	run, crashes := chaosBrief, 2
	if v := os.Getenv(chaosEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", chaosEnv, v, err)
		}
		run, crashes = d, int(d/(10*time.Second))
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d, %v, %d crashes", seed, run, crashes)
	rng := rand.New(rand.NewPCG(uint64(seed), 1))

	s := pgtest.Start(t, "autovacuum=off")
	ctx := context.Background()
	setup := openPool(t, s.DSN("postgres"))
	if _, err := setup.Exec(ctx, `CREATE TABLE ledger (n BIGSERIAL PRIMARY KEY, term BIGINT NOT NULL);
CREATE TABLE writes (n BIGINT NOT NULL, resource TEXT NOT NULL, term BIGINT NOT NULL);
CREATE TABLE counter (n BIGINT NOT NULL); INSERT INTO counter VALUES (0);
-- The guard's writes take their number at commit, as the last thing they do.
CREATE FUNCTION ledger_order() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE counter SET n = n + 1;
  INSERT INTO writes SELECT n, 'ledger', NEW.term FROM counter;
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER ledger_order AFTER INSERT ON ledger DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ledger_order()`); err != nil {
		t.Fatal(err)
	}
	if err := pgtrigger.Install(ctx, setup, pgtrigger.Config{Table: "ledger", Resource: "ledger", Cluster: cluster, HMACKey: key, Schema: "tfp"}); err != nil {
		t.Fatal(err)
	}
	setup.Close()

	// Sessions: synchronous_commit off or on, chosen per pool.
	var (
		mu       sync.Mutex
		pools    [2]*pgxpool.Pool
		dbs      [2]*sql.DB
		sfs      [2]*sqlfence.Fence
		pfs      [2]*pgfence.Fence
		current  atomic.Uint64 // the leader's term
		acked    = map[string]uint64{}
		stop     atomic.Bool
		opsDone  atomic.Int64
		refused  atomic.Int64
		failures = make(chan error, 64)
	)
	current.Store(2)
	open := func() {
		mu.Lock()
		defer mu.Unlock()
		for i, sc := range []string{"off", "on"} {
			dsn := s.DSN("postgres") + "&synchronous_commit=" + sc
			p, err := pgxpool.New(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			db, err := sql.Open("pgx", dsn)
			if err != nil {
				t.Fatal(err)
			}
			sf, err := sqlfence.Open(ctx, db, sqlfence.Postgres)
			if err != nil {
				t.Fatal(err)
			}
			pf, err := pgfence.Open(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			pools[i], dbs[i], sfs[i], pfs[i] = p, db, sf, pf
		}
	}
	closeAll := func() {
		mu.Lock()
		defer mu.Unlock()
		for i := range pools {
			pools[i].Close()
			dbs[i].Close()
		}
	}
	pick := func(r *rand.Rand) (*pgxpool.Pool, *sqlfence.Fence, *pgfence.Fence) {
		mu.Lock()
		defer mu.Unlock()
		i := r.IntN(2)
		return pools[i], sfs[i], pfs[i]
	}
	open()
	resources := []string{"r", "ledger"}

	// write runs one write under e through a random way in; nil or a
	// refusal or a connection's loss.
	write := func(r *rand.Rand, e epoch.Epoch) error {
		pool, sf, pf := pick(r)
		hold := fmt.Sprintf("SELECT pg_sleep(%f)", float64(r.IntN(3))/1000)
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		switch r.IntN(3) {
		case 0:
			return sf.Tx(wctx, "r", e, func(tx *sql.Tx) error {
				if _, err := tx.ExecContext(wctx, hold); err != nil {
					return err
				}
				_, err := tx.ExecContext(wctx, "UPDATE counter SET n = n + 1")
				if err == nil {
					_, err = tx.ExecContext(wctx, "INSERT INTO writes SELECT n, 'r', $1 FROM counter", int64(e.Term))
				}
				return err
			})
		case 1:
			iso := []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable}[r.IntN(3)]
			return pf.TxWith(wctx, "r", e, pgx.TxOptions{IsoLevel: iso}, func(tx pgx.Tx) error {
				if _, err := tx.Exec(wctx, hold); err != nil {
					return err
				}
				_, err := tx.Exec(wctx, "UPDATE counter SET n = n + 1")
				if err == nil {
					_, err = tx.Exec(wctx, "INSERT INTO writes SELECT n, 'r', $1 FROM counter", int64(e.Term))
				}
				return err
			})
		default:
			g := guardFence{t: t, pool: pool, tables: map[string]string{"ledger": "ledger"}}
			return g.Do(wctx, "ledger", e, func(context.Context) error { return nil })
		}
	}
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		r := rand.New(rand.NewPCG(uint64(seed), uint64(10+w)))
		go func() {
			defer wg.Done()
			for !stop.Load() {
				term := current.Load()
				if r.IntN(4) == 0 {
					term-- // a deposed leader's late write
				}
				err := write(r, ep(term, fmt.Sprint("n", term%3)))
				opsDone.Add(1)
				switch {
				case errors.Is(err, storageguard.ErrStale):
					refused.Add(1)
				case err != nil:
					time.Sleep(10 * time.Millisecond) // the server may be down: back off
				}
			}
		}()
	}
	// The leader: raises through a random fence, each raise served within
	// raiseBound once the server answers.
	const raiseBound = 30 * time.Second
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(uint64(seed), 2))
		for !stop.Load() {
			next := current.Load() + 1
			e := ep(next, fmt.Sprint("n", next%3))
			for _, res := range resources {
				start := time.Now()
				for {
					pool, sf, pf := pick(r)
					actx, cancel := context.WithTimeout(ctx, raiseBound)
					var err error
					switch {
					case res == "ledger":
						err = guardFence{t: t, pool: pool, tables: map[string]string{"ledger": "ledger"}}.Admit(actx, res, e)
					case r.IntN(2) == 0:
						err = sf.Admit(actx, res, e)
					default:
						err = pf.Admit(actx, res, e)
					}
					cancel()
					if err == nil {
						mu.Lock()
						acked[res] = next
						mu.Unlock()
						break
					}
					if errors.Is(err, context.DeadlineExceeded) {
						failures <- fmt.Errorf("the raise of %v on %s was not served within %v of its call (%v)", e, res, raiseBound, time.Since(start))
						return
					}
					// A crash cut it: try again, the clock from now.
					time.Sleep(10 * time.Millisecond)
					start = time.Now()
				}
			}
			current.Store(next)
		}
	}()

	deadline := time.Now().Add(run)
	for c := 0; c < crashes; c++ {
		// A random moment in the next share of the time left (the fault's
		// timing is the workload, not a synchronisation).
		wait := time.Until(deadline) / time.Duration(crashes-c+1)
		if wait <= 0 {
			crashes = c
			break
		}
		time.Sleep(wait/2 + time.Duration(rng.Int64N(int64(wait/2)+1)))
		mu.Lock()
		want := map[string]uint64{}
		for k, v := range acked {
			want[k] = v
		}
		mu.Unlock()
		s.Crash()
		closeAll()
		s.Restart()
		open()
		for res, term := range want {
			h, err := pgfenceHighest(ctx, pools[1], res)
			if err != nil {
				t.Fatal(err)
			}
			if h < term {
				var dump []string
				if rows, err := pools[1].Query(ctx, "SELECT encode(resource, 'escape') || '=' || term FROM termfence_fence"); err == nil {
					dump, _ = pgx.CollectRows(rows, pgx.RowTo[string])
				}
				t.Logf("fence rows after the crash: %v", dump)
				t.Fatalf("after crash %d: the fence of %s says term %d; the raise to %d was acknowledged before the crash", c+1, res, h, term)
			}
		}
	}
	time.Sleep(time.Until(deadline))
	stop.Store(true)
	wg.Wait()
	close(failures)
	for err := range failures {
		t.Error(err)
	}

	if rows, err := pools[1].Query(ctx, "SELECT encode(resource, 'escape') || '=' || term FROM termfence_fence"); err == nil {
		dump, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		t.Logf("fence rows at the end: %v, acked %v", dump, acked)
	}
	// Never an older epoch after a newer one, per resource, in commit order.
	rows, err := pools[1].Query(ctx, "SELECT n, resource, term FROM writes ORDER BY n")
	if err != nil {
		t.Fatal(err)
	}
	max := map[string]int64{}
	writes := 0
	for rows.Next() {
		var n, term int64
		var res string
		if err := rows.Scan(&n, &res, &term); err != nil {
			t.Fatal(err)
		}
		writes++
		if term < max[res] {
			t.Errorf("write %d under term %d on %s committed after one under term %d", n, term, res, max[res])
		}
		if term > max[res] {
			max[res] = term
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	closeAll()
	if writes == 0 || current.Load() < 4 {
		t.Fatalf("the harness did nothing: %d writes committed, term %d", writes, current.Load())
	}
	t.Logf("%d attempts, %d committed writes, %d refused as stale, %d raises (term 2 to %d), %d crashes", opsDone.Load(), writes, refused.Load(), current.Load()-2, current.Load(), crashes)
}

// chaosBrief is the brief run's length.
const chaosBrief = 10 * time.Second

// pgfenceHighest reads the fence row's term of resource (0 if none).
func pgfenceHighest(ctx context.Context, pool *pgxpool.Pool, resource string) (uint64, error) {
	var term int64
	err := pool.QueryRow(ctx, "SELECT term FROM termfence_fence WHERE resource = $1", []byte(resource)).Scan(&term)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return uint64(term), err
}
