package sqltest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/termfence/termfence/storageguard"
)

// CommitLog records, in dsn's first schema, the synchronous_commit setting
// in force when each transaction that inserts or updates a row of
// termfence_fence commits: a deferred constraint trigger on the fence
// table runs as the transaction commits, after every statement of it, and
// PostgreSQL reads synchronous_commit after the deferred triggers, so the
// logged value is the one the commit used. The trigger's function is
// SECURITY DEFINER, so any writer role can log.
type CommitLog struct {
	db *sql.DB
}

// NewCommitLog creates the fence table if missing, the log table and the
// trigger (before pgtrigger.Install, which approves the triggers it finds
// on the fence table).
func NewCommitLog(tb testing.TB, dsn string) *CommitLog {
	tb.Helper()
	db := OpenPostgres(tb, dsn)
	_, err := db.Exec(`
CREATE TABLE IF NOT EXISTS termfence_fence (resource BYTEA PRIMARY KEY, cluster TEXT NOT NULL, term BIGINT NOT NULL, leader TEXT NOT NULL);
CREATE TABLE tf_commit_log (n BIGSERIAL PRIMARY KEY, term BIGINT NOT NULL, setting TEXT NOT NULL);
CREATE FUNCTION tf_log_commit() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
  INSERT INTO tf_commit_log (term, setting) VALUES (NEW.term, current_setting('synchronous_commit'));
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER tf_log_commit AFTER INSERT OR UPDATE ON termfence_fence
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION tf_log_commit();`)
	if err != nil {
		tb.Fatalf("create the commit log: %v", err)
	}
	return &CommitLog{db: db}
}

// Commit is one logged commit: the fence row's term it wrote and the
// synchronous_commit setting it committed with.
type Commit struct {
	Term    int64
	Setting string
}

// Commits returns the logged commits, oldest first.
func (l *CommitLog) Commits(tb testing.TB) []Commit {
	tb.Helper()
	rows, err := l.db.Query("SELECT term, setting FROM tf_commit_log ORDER BY n")
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	var out []Commit
	for rows.Next() {
		var c Commit
		if err := rows.Scan(&c.Term, &c.Setting); err != nil {
			tb.Fatal(err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// LockWaiters returns how many sessions named app (application_name) wait
// for a lock now.
func LockWaiters(tb testing.TB, dsn, app string) int {
	tb.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'", app).Scan(&n); err != nil {
		tb.Fatalf("count the sessions of %s waiting for a lock: %v", app, err)
	}
	return n
}

// WaitFor polls cond until it holds, failing the test after limit (a
// bound for a hung server, never a timing assertion).
func WaitFor(tb testing.TB, limit time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("after %v: still waiting for %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// RaiseTakesItsTurn checks that a newer epoch's raise waits only for the
// older-epoch holders that got in before it asked. older holds the
// resource under epoch 5 (a Do whose write waits); the raise of epoch 6
// through raiser (its sessions named raiserApp) is seen waiting for a
// lock; then a second older-epoch Do starts through older (sessions named
// olderApp). The late Do must not be admitted ahead of the waiting raise:
// it must wait (seen as a lock waiter), and once the first holder ends,
// the raise completes and the late Do is refused as stale. Before the
// fences took a turn, PostgreSQL granted the late Do's FOR SHARE at once.
func RaiseTakesItsTurn(t *testing.T, dsn string, older, raiser storageguard.Fence, olderApp, raiserApp string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	old, newer := ep(5, "a"), ep(6, "b")
	if err := older.Admit(ctx, "turn", old); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	holding := make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- older.Do(ctx, "turn", old, func(context.Context) error {
			close(holding)
			<-release
			return nil
		})
	}()
	select {
	case <-holding:
	case err := <-first:
		t.Fatalf("the first older-epoch Do: %v", err)
	}
	raised := make(chan error, 1)
	go func() { raised <- raiser.Admit(ctx, "turn", newer) }()
	WaitFor(t, time.Minute, "the raise to wait for the older holder", func() bool { return LockWaiters(t, dsn, raiserApp) >= 1 })

	var lateRan atomic.Bool
	late := make(chan error, 1)
	go func() {
		late <- older.Do(ctx, "turn", old, func(context.Context) error {
			lateRan.Store(true)
			return nil
		})
	}()
	// Either the late Do waits for a lock (its turn is after the raise),
	// or it got in ahead of the raise: that is the failure.
	WaitFor(t, time.Minute, "the late older-epoch Do to wait or be admitted", func() bool {
		return lateRan.Load() || LockWaiters(t, dsn, olderApp) >= 1
	})
	if lateRan.Load() {
		close(release)
		<-first
		<-raised
		<-late
		t.Fatalf("an older-epoch Do that began after the raise of %v was waiting was admitted ahead of it", newer)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("the first older-epoch Do: %v", err)
	}
	if err := <-raised; err != nil {
		t.Fatalf("the raise: %v", err)
	}
	if err := <-late; !errors.Is(err, storageguard.ErrStale) || lateRan.Load() {
		t.Fatalf("the late older-epoch Do = %v (write ran: %v), want ErrStale without its write", err, lateRan.Load())
	}
}

// StreamResult is what RaiseUnderStream saw.
type StreamResult struct {
	// Before is how many older-epoch transactions the stream had admitted
	// when the raise was first seen waiting; During, how many it admitted
	// after that until the raise completed (they began before it asked).
	Before, During int
	// Wait is how long the raise took from its call to its return.
	Wait time.Duration
}

// RaiseUnderStream runs a continuous stream of short older-epoch
// transactions (workers goroutines looping older.Do under epoch 5 on one
// resource), raises epoch 6 through raiser in its midst, and checks the
// order: no older-epoch Do that began after the raise was seen waiting
// (its sessions named raiserApp) is admitted, and the raise completes (a
// bound of limit for a hung server; it is served once the transactions
// that began before it end, however long the stream goes on). Each worker
// stops at its first refusal.
func RaiseUnderStream(t testing.TB, dsn string, older, raiser storageguard.Fence, raiserApp string, workers int, limit time.Duration) StreamResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	old, newer := ep(5, "a"), ep(6, "b")
	if err := older.Admit(ctx, "stream", old); err != nil {
		t.Fatal(err)
	}
	var (
		admitted   atomic.Int64
		asked      atomic.Bool // the raise was seen waiting
		lateIn     atomic.Int64
		before     atomic.Int64
		wg         sync.WaitGroup
		errs       = make(chan error, workers)
		streamDone = make(chan struct{})
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				began := asked.Load()
				err := older.Do(ctx, "stream", old, func(context.Context) error {
					admitted.Add(1)
					if began {
						lateIn.Add(1)
					}
					return nil
				})
				if errors.Is(err, storageguard.ErrStale) {
					return
				}
				if err != nil {
					errs <- fmt.Errorf("an older-epoch Do: %w", err)
					return
				}
			}
		}()
	}
	go func() { wg.Wait(); close(streamDone) }()
	// Let the stream run before the raise asks.
	WaitFor(t, limit, "the stream to start", func() bool { return admitted.Load() >= int64(4*workers) })
	start := time.Now()
	raised := make(chan error, 1)
	go func() { raised <- raiser.Admit(ctx, "stream", newer) }()
	var res StreamResult
	seen := false
	for !seen {
		select {
		case err := <-raised:
			raised <- err
			seen = true
		default:
			if LockWaiters(t, dsn, raiserApp) >= 1 {
				seen = true
			} else {
				time.Sleep(time.Millisecond)
			}
		}
	}
	before.Store(admitted.Load())
	asked.Store(true)
	err := <-raised
	res.Wait = time.Since(start)
	res.Before = int(before.Load())
	res.During = int(admitted.Load()) - res.Before
	if err != nil {
		t.Fatalf("the raise under the stream (after %v, %d older-epoch transactions admitted meanwhile): %v", res.Wait, res.During, err)
	}
	<-streamDone
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := lateIn.Load(); n > 0 {
		t.Fatalf("%d older-epoch Do calls that began after the raise of %v was waiting were admitted ahead of it", n, newer)
	}
	return res
}

// NestedDoWithRaisePending checks a Do (and Admit) nested in the write of
// a Do on the same fence and resource while a newer epoch's raise waits
// for the outer write: the nested call must not take a turn behind that
// raise (which waits for the outer write, which waits for the nested call:
// a deadlock until the context ends), but be decided against the outer
// hold — the same epoch runs, an older one is refused. A context kept from
// the write and used after it returned holds nothing: the call goes through
// the fence and, after the raise, is refused.
func NestedDoWithRaisePending(t *testing.T, dsn string, f, raiser storageguard.Fence, raiserApp string) {
	t.Helper()
	ctx := context.Background()
	old, newer := ep(5, "a"), ep(6, "b")
	if err := f.Admit(ctx, "nest", old); err != nil {
		t.Fatal(err)
	}
	raised := make(chan error, 1)
	var kept context.Context
	innerRan := false
	err := f.Do(ctx, "nest", old, func(wctx context.Context) error {
		kept = wctx
		go func() { raised <- raiser.Admit(ctx, "nest", newer) }()
		WaitFor(t, time.Minute, "the raise to wait for the outer write", func() bool { return LockWaiters(t, dsn, raiserApp) >= 1 })
		nctx, cancel := context.WithTimeout(wctx, 20*time.Second)
		defer cancel()
		if err := f.Do(nctx, "nest", old, func(context.Context) error { innerRan = true; return nil }); err != nil {
			return fmt.Errorf("a Do nested in the write, same epoch, raise pending: %w", err)
		}
		if err := f.Admit(nctx, "nest", old); err != nil {
			return fmt.Errorf("an Admit nested in the write, same epoch: %w", err)
		}
		if err := f.Do(nctx, "nest", ep(4, "z"), func(context.Context) error { return errors.New("ran") }); !errors.Is(err, storageguard.ErrStale) {
			return fmt.Errorf("a nested Do under an older epoch = %v, want ErrStale", err)
		}
		return nil
	})
	if err != nil {
		<-raised
		t.Fatal(err)
	}
	if !innerRan {
		t.Fatal("the nested write did not run")
	}
	if err := <-raised; err != nil {
		t.Fatalf("the raise after the outer write: %v", err)
	}
	ran := false
	if err := f.Do(kept, "nest", old, func(context.Context) error { ran = true; return nil }); !errors.Is(err, storageguard.ErrStale) || ran {
		t.Fatalf("a Do with the outer write's context kept past it, after the raise = %v (ran %v), want ErrStale", err, ran)
	}
}
