package sqltest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// WithParams returns dsn with PostgreSQL run-time parameters set for every
// session opened through it, in key, value pairs (pgx sends DSN keys it
// does not know itself as run-time parameters): application_name, say, to
// find a fence's sessions, or idle_in_transaction_session_timeout.
func WithParams(tb testing.TB, dsn string, kv ...string) string {
	tb.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		tb.Fatalf("DSN is not a URL: %v", err)
	}
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Terminate ends, through a session of its own on dsn, every session whose
// application_name is app and that is idle in a transaction (a Do's fence
// transaction while its write runs outside it), waits until they are gone,
// and returns how many it ended: the fault of a database session killed
// under a fence (pg_terminate_backend by an operator, a failover, an
// out-of-memory kill).
func Terminate(ctx context.Context, dsn, app string) (int, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n int
	err = db.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 10000))
		FROM pg_stat_activity
		WHERE application_name = $1 AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()`, app).Scan(&n)
	return n, err
}

func ep(term uint64, leader string) epoch.Epoch {
	return epoch.Epoch{Cluster: "payments", Term: term, Leader: leader}
}

// FenceLost checks a fence whose Do holds its lock in a database session
// while the write runs outside it: kill ends that session in the middle of
// the write (Terminate), after which a newer epoch is admitted beside the
// still-running write — nothing can stop that — and Do must then say so
// with an error matching storageguard.ErrFenceLost, never the write's nil.
func FenceLost(t *testing.T, f storageguard.Fence, kill func(context.Context) (int, error)) {
	t.Helper()
	ctx := context.Background()
	older, newer := ep(33, "a"), ep(34, "b")
	if err := f.Admit(ctx, "r", older); err != nil {
		t.Fatal(err)
	}
	err := f.Do(ctx, "r", older, func(context.Context) error {
		n, err := kill(ctx)
		if err != nil || n != 1 {
			return fmt.Errorf("terminating the fence's session: %d sessions, %v", n, err)
		}
		// The lock went with the session: the newer epoch gets in while
		// this write still runs (bounded, in case the kill did nothing).
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := f.Admit(actx, "r", newer); err != nil {
			return fmt.Errorf("the newer epoch, after the older session was killed: %w", err)
		}
		return nil
	})
	if !errors.Is(err, storageguard.ErrFenceLost) {
		t.Fatalf("Do whose fence session was killed under its write = %v, want an error matching ErrFenceLost", err)
	}
	if h, herr := f.Highest(ctx, "r"); herr != nil || h != newer {
		t.Fatalf("Highest = %v, %v; want %v", h, herr, newer)
	}
	// The fence still works for the next caller.
	if err := f.Do(ctx, "r", newer, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("Do after a lost session: %v", err)
	}
}

// IdleTimeoutHolds checks a fence over sessions whose server ends them
// after idleTimeout idle in a transaction
// (idle_in_transaction_session_timeout, WithParams): a Do whose write runs
// six times that long keeps its lock all along (a newer epoch waits), and
// returns the write's nil. The raises go through raiser, a fence on the
// same table over sessions without that timeout: the fault is aimed at the
// Do's session alone (a raise's own transaction, on a loaded machine, can
// sit between two statements longer than a 100 ms timeout, and its
// session's end would be a failure of the test's making).
func IdleTimeoutHolds(t *testing.T, f, raiser storageguard.Fence, idleTimeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	older, newer := ep(33, "a"), ep(34, "b")
	if err := raiser.Admit(ctx, "r", older); err != nil {
		t.Fatal(err)
	}
	raised := make(chan error, 1)
	err := f.Do(ctx, "r", older, func(context.Context) error {
		go func() { raised <- raiser.Admit(ctx, "r", newer) }()
		// The injected fault: the write stalls well past the server's
		// idle-in-transaction timeout.
		select {
		case err := <-raised:
			raised <- err
			return fmt.Errorf("epoch %v was admitted (%v) while the write under %v ran: the server ended the idle fence session", newer, err, older)
		case <-time.After(6 * idleTimeout):
			return nil
		}
	})
	if rerr := <-raised; rerr != nil {
		t.Fatalf("the newer epoch after the write: %v", rerr)
	}
	if err != nil {
		t.Fatalf("Do = %v", err)
	}
}
