package sqlfence_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/termfence/termfence/storageguard/internal/sqltest"
	"github.com/termfence/termfence/storageguard/sqlfence"
)

// TestSQLiteTxFirstComeFirstServed: same-epoch writers of one Fence on
// SQLite get the database's write lock in the order they asked for it.
// SQLite's own busy handler polls, with sleeps that grow to 100 ms, so a
// writer that has waited long keeps losing the lock to newer ones: under a
// burst of writers one Tx waited seconds while the others took
// milliseconds (the fault suite's store answered a write after more than
// the node's 5 s). A Tx may be overtaken only by writers that asked at
// about the same moment, never by a stream of later ones.
func TestSQLiteTxFirstComeFirstServed(t *testing.T) {
	ctx := context.Background()
	db := sqltest.OpenSQLite(t, filepath.Join(t.TempDir(), "fair.db"))
	if _, err := db.ExecContext(ctx, "CREATE TABLE rec (k TEXT PRIMARY KEY, v INTEGER)"); err != nil {
		t.Fatal(err)
	}
	f := open(t, db, sqlfence.SQLite)
	e := ep(7, "node-a")
	if err := f.Admit(ctx, "r", e); err != nil {
		t.Fatal(err)
	}
	const writers, each = 14, 60
	var (
		asked, admitted atomic.Int64
		worst           atomic.Int64 // most admissions beyond a Tx's turn
		wg              sync.WaitGroup
	)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				turn := asked.Add(1)
				err := f.Tx(ctx, "r", e, func(tx *sql.Tx) error {
					if late := admitted.Add(1) - turn; late > worst.Load() {
						worst.Store(late) // fn runs under the write lock: one at a time
					}
					_, err := tx.ExecContext(ctx, "INSERT INTO rec (k, v) VALUES ('x', ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v", i)
					return err
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// Each writer has one Tx outstanding, so FIFO admission lets at most
	// the other writers' requests of about the same moment go first.
	if got, limit := worst.Load(), int64(2*writers); got > limit {
		t.Errorf("a Tx got the lock after %d later ones (limit %d): SQLite writers are not served in order", got, limit)
	}
	t.Logf("worst overtaking: %d of %d Txs", worst.Load(), writers*each)
}
