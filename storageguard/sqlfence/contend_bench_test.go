package sqlfence_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/termfence/termfence/storageguard/internal/sqltest"
	"github.com/termfence/termfence/storageguard/sqlfence"
)

// BenchmarkSQLiteTxContended runs 14 writers at once, each a same-epoch Tx
// that upserts a row, on one SQLite file (WAL, synchronous=FULL): the
// fault suite's store under a paused leader's burst. It reports the
// slowest and the 99th percentile Tx of the run: SQLite's busy handler
// polls, so a writer that waits long can keep losing the lock to newer
// ones.
func BenchmarkSQLiteTxContended(b *testing.B) {
	ctx := context.Background()
	db := sqltest.OpenSQLite(b, filepath.Join(b.TempDir(), "contend.db"))
	if _, err := db.ExecContext(ctx, "CREATE TABLE rec (k TEXT PRIMARY KEY, v INTEGER)"); err != nil {
		b.Fatal(err)
	}
	f := open(b, db, sqlfence.SQLite)
	e := ep(7, "node-a")
	if err := f.Admit(ctx, "r", e); err != nil {
		b.Fatal(err)
	}
	const writers = 14
	var (
		mu    sync.Mutex
		waits []time.Duration
	)
	b.ResetTimer()
	var wg sync.WaitGroup
	per := b.N/writers + 1
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				start := time.Now()
				err := f.Tx(ctx, "r", e, func(tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, "INSERT INTO rec (k, v) VALUES ('x', ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v", i)
					return err
				})
				d := time.Since(start)
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				waits = append(waits, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	slices.Sort(waits)
	b.ReportMetric(float64(waits[len(waits)-1].Microseconds()), "max-µs")
	b.ReportMetric(float64(waits[len(waits)*99/100].Microseconds()), "p99-µs")
}
