package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/fencetest"
	"github.com/termfence/termfence/storageguard/internal/sqltest"
	"github.com/termfence/termfence/storageguard/sqlfence"
)

func ep(term uint64, leader string) epoch.Epoch {
	return epoch.Epoch{Cluster: "payments", Term: term, Leader: leader}
}

func open(t testing.TB, db *sql.DB, d sqlfence.Dialect) *sqlfence.Fence {
	t.Helper()
	s, err := sqlfence.Open(context.Background(), db, d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// openPast opens a fence on db whatever its settings, with the check of
// each transaction on: a fence whose connections were changed after Open,
// or a second handle opened by other code (Open itself refuses settings
// that cannot keep a raise).
func openPast(t testing.TB, db *sql.DB) *sqlfence.Fence {
	t.Helper()
	f, err := sqlfence.OpenUnchecked(context.Background(), db, sqlfence.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	sqlfence.RecheckDurable(f)
	return f
}

func TestSQLite(t *testing.T) {
	var path string
	fencetest.Run(t, fencetest.Kind{
		Open: func(t *testing.T) storageguard.Fence {
			path = filepath.Join(t.TempDir(), "fence.db")
			return open(t, sqltest.OpenSQLite(t, path), sqlfence.SQLite)
		},
		Reopen: func(t *testing.T) storageguard.Fence {
			return open(t, sqltest.OpenSQLite(t, path), sqlfence.SQLite)
		},
		SerialWriters: true,
		Goroutines:    8, Ops: 40,
	})
	t.Run("Tx", func(t *testing.T) {
		db := sqltest.OpenSQLite(t, filepath.Join(t.TempDir(), "fence.db"))
		testSQLTx(t, db, open(t, db, sqlfence.SQLite), "?")
	})
}

func TestPostgres(t *testing.T) {
	var dsn string
	fencetest.Run(t, fencetest.Kind{
		Open: func(t *testing.T) storageguard.Fence {
			dsn = sqltest.PostgresDSN(t)
			return open(t, sqltest.OpenPostgres(t, dsn), sqlfence.Postgres)
		},
		Reopen: func(t *testing.T) storageguard.Fence {
			return open(t, sqltest.OpenPostgres(t, dsn), sqlfence.Postgres)
		},
		Goroutines: 8, Ops: 60,
		Waiting: func(t *testing.T) int { return sqltest.PostgresLockWaiters(t, dsn) },
	})
	t.Run("Tx", func(t *testing.T) {
		db := sqltest.OpenPostgres(t, sqltest.PostgresDSN(t))
		testSQLTx(t, db, open(t, db, sqlfence.Postgres), "$1")
	})
}

// testSQLTx runs fencetest.TxAtomic over Fence.Tx.
func testSQLTx(t *testing.T, db *sql.DB, s *sqlfence.Fence, ph string) {
	ctx := context.Background()
	fencetest.TxAtomic(t, s, fencetest.TxAPI{
		Placeholder: ph,
		Exec:        func(stmt string) error { _, err := db.Exec(stmt); return err },
		Read: func() (c string, err error) {
			return c, db.QueryRow("SELECT content FROM files WHERE id = 'f'").Scan(&c)
		},
		Tx: func(e epoch.Epoch, then error, stmt string, args ...any) error {
			return s.Tx(ctx, "files/f", e, func(tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, stmt, args...); err != nil {
					return err
				}
				return then
			})
		},
		NilFn: func(e epoch.Epoch) error { return s.Tx(ctx, "files/f", e, nil) },
	})
}

func TestOpenBadInput(t *testing.T) {
	db := sqltest.OpenSQLite(t, filepath.Join(t.TempDir(), "x.db"))
	if _, err := sqlfence.Open(context.Background(), db, sqlfence.Dialect(9)); !errors.Is(err, sqlfence.ErrBadDialect) {
		t.Fatalf("Open(Dialect(9)) = %v", err)
	}
	if _, err := sqlfence.Open(context.Background(), nil, sqlfence.SQLite); err == nil {
		t.Fatal("Open(nil db) succeeded")
	}
}

// TestPostgresSameEpochTxConcurrent: two transactions under one epoch hold
// the fence row FOR SHARE together.
func TestPostgresSameEpochTxConcurrent(t *testing.T) {
	s := open(t, sqltest.OpenPostgres(t, sqltest.PostgresDSN(t)), sqlfence.Postgres)
	fencetest.TxSameEpochConcurrent(t, s, func(ctx context.Context, e epoch.Epoch, body func() error) error {
		return s.Tx(ctx, "r", e, func(*sql.Tx) error { return body() })
	})
}

// txFence presents Fence.Tx as a storageguard.Fence so that the suite's random-epoch test
// runs over Tx (raise inside the transaction) as well as Do.
type txFence struct{ *sqlfence.Fence }

func (f txFence) Do(ctx context.Context, resource string, e epoch.Epoch, write func(context.Context) error) error {
	return f.Tx(ctx, resource, e, func(*sql.Tx) error { return write(ctx) })
}

func TestSQLiteTxConcurrentRandomEpochs(t *testing.T) {
	db := sqltest.OpenSQLite(t, filepath.Join(t.TempDir(), "fence.db"))
	fencetest.ConcurrentRandom(t, 8, 40, txFence{open(t, db, sqlfence.SQLite)})
}

func TestPostgresTxConcurrentRandomEpochs(t *testing.T) {
	db := sqltest.OpenPostgres(t, sqltest.PostgresDSN(t))
	fencetest.ConcurrentRandom(t, 8, 60, txFence{open(t, db, sqlfence.Postgres)})
}

// durable is the SQLite fence as the multi-process tests of fencetest open
// it: the file's database closes with the fence.
var durable = fencetest.Durable{
	Open: func(path string) (storageguard.Fence, error) {
		dsn := sqltest.SQLiteDSN(path)
		v, peer, _ := strings.Cut(os.Getenv(fencetest.VariantEnv), "+peer-")
		if v != "" {
			// The power-loss tests: "journal-synchronous", for example
			// "delete-full".
			// "delete-full-nocheck": with the test-only knob that lets it
			// raise whatever the settings (the control).
			p := strings.Split(v, "-")
			dsn = "file:" + path + "?_pragma=busy_timeout(20000)&_pragma=journal_mode(" + p[0] + ")&_pragma=synchronous(" + p[1] + ")"
		}
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			return nil, err
		}
		openFence := sqlfence.Open
		if strings.HasSuffix(v, "-nocheck") {
			openFence = sqlfence.OpenUnchecked
		}
		f, err := openFence(context.Background(), db, sqlfence.SQLite)
		if err != nil {
			db.Close()
			return nil, err
		}
		w := withDB{Fence: f, db: db}
		if peer != "" {
			if w.stop, err = startPeer(f, path, peer); err != nil {
				f.Close()
				db.Close()
				return nil, err
			}
		}
		return w, nil
	},
}

// withDB closes its database with the fence, and stops its peer.
type withDB struct {
	*sqlfence.Fence
	db   *sql.DB
	stop func()
}

func (f withDB) Close() error {
	if f.stop != nil {
		f.stop()
	}
	f.Fence.Close()
	return f.db.Close()
}

// startPeer is the variant "…+peer-<level>": a second handle on the
// database at path, with synchronous=<level> and a checkpoint every few
// pages, writes through a fence of its own under one epoch, again and
// again, beside the raisers (an application's other pool or process). Its
// epoch's raise is made by main, a FULL connection; the peer's own
// transactions only write. It returns the function that stops it.
func startPeer(main *sqlfence.Fence, path, level string) (func(), error) {
	ctx, cancel := context.WithCancel(context.Background())
	pe := epoch.Epoch{Cluster: "peer", Term: 1, Leader: "peer"}
	if err := main.Admit(ctx, "peer", pe); err != nil {
		cancel()
		return nil, err
	}
	pdb, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_pragma=wal_autocheckpoint(4)&_pragma=synchronous("+level+")")
	if err != nil {
		cancel()
		return nil, err
	}
	pf, err := sqlfence.OpenUnchecked(ctx, pdb, sqlfence.SQLite) // a handle other code opened
	if err == nil {
		sqlfence.RecheckDurable(pf)
	}
	if err != nil {
		cancel()
		pdb.Close()
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			err := pf.Tx(ctx, "peer", pe, func(tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS peer_data (x BLOB)"); err != nil {
					return err
				}
				_, err := tx.ExecContext(ctx, "INSERT INTO peer_data VALUES (zeroblob(8192))")
				return err
			})
			if errors.Is(err, sqlfence.ErrNotDurable) {
				return // refused for good: this peer writes nothing
			}
		}
	}()
	return func() { cancel(); <-done; pf.Close(); pdb.Close() }, nil
}

// TestSQLiteMultiProcess: processes that share a SQLite file never let an
// older epoch's write overlap a newer one's.
func TestSQLiteMultiProcess(t *testing.T) {
	t.Parallel()
	fencetest.MultiProcess(t, durable)
}

// TestSQLiteCrashDurability: no acknowledged raise is lost to a SIGKILL.
func TestSQLiteCrashDurability(t *testing.T) {
	t.Parallel()
	fencetest.CrashDurability(t, durable)
}

// TestPostgresSessionKilledUnderDo: the session holding a Do's lock is
// terminated mid-write; Do reports storageguard.ErrFenceLost.
func TestPostgresSessionKilledUnderDo(t *testing.T) {
	dsn := sqltest.PostgresDSN(t)
	app := "fence-" + t.Name()
	f := open(t, sqltest.OpenPostgres(t, sqltest.WithParams(t, dsn, "application_name", app)), sqlfence.Postgres)
	sqltest.FenceLost(t, f, func(ctx context.Context) (int, error) { return sqltest.Terminate(ctx, dsn, app) })
}

// TestPostgresIdleTimeoutUnderDo: a server-side
// idle_in_transaction_session_timeout shorter than the write does not end
// the session that holds a Do's lock.
func TestPostgresIdleTimeoutUnderDo(t *testing.T) {
	plain := sqltest.PostgresDSN(t)
	dsn := sqltest.WithParams(t, plain, "idle_in_transaction_session_timeout", "100")
	sqltest.IdleTimeoutHolds(t, open(t, sqltest.OpenPostgres(t, dsn), sqlfence.Postgres),
		open(t, sqltest.OpenPostgres(t, plain), sqlfence.Postgres), 100*time.Millisecond)
}

// TestSQLiteTxCancelHolds and TestPostgresTxCancelHolds: Tx keeps its
// transaction, and with it the fence, while fn runs, whatever happens to
// the caller's context.
func TestSQLiteTxCancelHolds(t *testing.T) {
	f := open(t, sqltest.OpenSQLite(t, filepath.Join(t.TempDir(), "fence.db")), sqlfence.SQLite)
	fencetest.CancelHolds(t, f, func(ctx context.Context, e epoch.Epoch, body func() error) error {
		return f.Tx(ctx, "r", e, func(*sql.Tx) error { return body() })
	})
}

func TestPostgresTxCancelHolds(t *testing.T) {
	f := open(t, sqltest.OpenPostgres(t, sqltest.PostgresDSN(t)), sqlfence.Postgres)
	fencetest.CancelHolds(t, f, func(ctx context.Context, e epoch.Epoch, body func() error) error {
		return f.Tx(ctx, "r", e, func(*sql.Tx) error { return body() })
	})
}

// TestSQLiteStableBeforeUse: every raise is committed to stable storage
// (the WAL fsynced, the new files' directory entries too) before the write
// runs or Admit returns, on the child's real system calls. The -shm file
// is SQLite's shared-memory index, rebuilt from the WAL after a crash.
func TestSQLiteStableBeforeUse(t *testing.T) {
	fencetest.StableBeforeUse(t, durable, func(path string) bool { return strings.HasSuffix(path, "-shm") })
}

// TestSQLiteNotDurableRefusedOnLaterRaise: the durability check guards
// every raise, not only a resource's first (which inserts its row): a
// raise to 4 over a connection that does not sync is refused even though
// term 3 was raised over one that does, and term 3 stays the highest.
func TestSQLiteNotDurableRefusedOnLaterRaise(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	ctx := context.Background()
	synced, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { synced.Close() })
	if err := open(t, synced, sqlfence.SQLite).Admit(ctx, "r", ep(3, "a")); err != nil {
		t.Fatalf("raise to 3 on synchronous=FULL: %v", err)
	}
	unsynced, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unsynced.Close() })
	f := openPast(t, unsynced)
	if err := f.Admit(ctx, "r", ep(3, "a")); err != nil {
		t.Fatalf("write under the current epoch on synchronous=NORMAL (no raise): %v", err)
	}
	if err := f.Admit(ctx, "r", ep(4, "b")); !errors.Is(err, sqlfence.ErrNotDurable) {
		t.Fatalf("raise from 3 to 4 on synchronous=NORMAL = %v, want ErrNotDurable", err)
	}
	if err := f.Tx(ctx, "r", ep(4, "b"), func(*sql.Tx) error { return nil }); !errors.Is(err, sqlfence.ErrNotDurable) {
		t.Fatalf("Tx raise from 3 to 4 on synchronous=NORMAL = %v, want ErrNotDurable", err)
	}
	if h, err := f.Highest(ctx, "r"); err != nil || h != ep(3, "a") {
		t.Fatalf("Highest = %v, %v after refused raises, want %v", h, err, ep(3, "a"))
	}
}

// TestSQLiteNotDurableRefused: on a connection whose commits are not
// synced (synchronous below FULL) a raise is refused, not acknowledged.
func TestSQLiteNotDurableRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	if _, err := sqlfence.Open(ctx, db, sqlfence.SQLite); !errors.Is(err, sqlfence.ErrNotDurable) {
		t.Fatalf("Open on synchronous=NORMAL = %v, want ErrNotDurable at once, not at the first raise", err)
	}
	f := openPast(t, db)
	if err := f.Admit(ctx, "r", ep(3, "a")); !errors.Is(err, sqlfence.ErrNotDurable) {
		t.Fatalf("raise on synchronous=NORMAL = %v, want ErrNotDurable", err)
	}
	err = f.Tx(ctx, "r", ep(3, "a"), func(*sql.Tx) error { return nil })
	if !errors.Is(err, sqlfence.ErrNotDurable) {
		t.Fatalf("Tx raise on synchronous=NORMAL = %v, want ErrNotDurable", err)
	}
	if h, err := f.Highest(ctx, "r"); err != nil || !h.IsZero() {
		t.Fatalf("Highest = %v, %v after refused raises", h, err)
	}
}
