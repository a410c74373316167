package pgtrigger_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/pgfence"
	"github.com/termfence/termfence/storageguard/pgtrigger"
)

// The leader-change workload: a sequence of epochs, one phase each. In
// phase k every writer — Go writers through pgfence's Tx, psql sessions
// through the guard — writes under epoch k, and every other attempt it
// makes is under the previous epoch, as a deposed leader that has not
// noticed yet would (its first write of the phase is always under k, so it
// saw k accepted before it tries the old one). Each committed write also
// takes the next number from a counter row as its last statement; the
// counter's row lock is held until commit, so the numbers are the commit
// order. The checker then finds any write under an older epoch that
// committed after one under a newer epoch.

const (
	phases        = 6
	goWriters     = 2
	psqlWriters   = 2
	writesPerTurn = 8
)

func phaseEpoch(k int) epoch.Epoch {
	return ep(uint64(10+k), []string{"node-a", "node-b", "node-c"}[k%3])
}

// violation is a write under an older epoch committed after one under a
// newer epoch.
type violation struct {
	n, term, afterN, afterTerm int64
	writer                     string
}

// checkCommitOrder reads table's writes in commit order and returns every
// violation, with the number of committed writes per writer kind.
func checkCommitOrder(t *testing.T, d *db, table string) (bad []violation, byKind map[string]int) {
	t.Helper()
	rows, err := d.pool.Query(context.Background(), "SELECT n, term, writer FROM "+table+" ORDER BY n")
	if err != nil {
		t.Fatal(err)
	}
	type w struct {
		n, term int64
		writer  string
	}
	all, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (w, error) {
		var x w
		return x, row.Scan(&x.n, &x.term, &x.writer)
	})
	if err != nil {
		t.Fatal(err)
	}
	byKind = map[string]int{}
	var max w
	for _, x := range all {
		byKind[strings.TrimRight(x.writer, "0123456789")]++
		if x.term < max.term {
			bad = append(bad, violation{n: x.n, term: x.term, writer: x.writer, afterN: max.n, afterTerm: max.term})
		}
		if x.term > max.term {
			max = x
		}
	}
	return bad, byKind
}

// runLeaderChange runs the workload on table (resource res). Go writers
// present each epoch's token to the guard in pgfence's Tx; psql writers
// present it with SET LOCAL. It returns how many attempts were refused as
// stale.
func runLeaderChange(t *testing.T, d *db, table, res string) (stale int) {
	t.Helper()
	ctx := context.Background()
	d.exec(t, "CREATE TABLE IF NOT EXISTS commit_clock (id int PRIMARY KEY, n bigint NOT NULL)")
	d.exec(t, "INSERT INTO commit_clock VALUES (1, 0) ON CONFLICT DO NOTHING")
	f, err := pgfence.Open(ctx, d.pool)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tokens := make([]string, phases)
	for k := range tokens {
		tokens[k] = sign(t, key, phaseEpoch(k))
	}
	// The counter, as the last statement of a write (the guarded row is
	// written, and the fence row locked, first).
	number := "WITH c AS (UPDATE commit_clock SET n = n + 1 WHERE id = 1 RETURNING n) UPDATE " + table + " t SET n = c.n FROM c WHERE t.writer = %s AND t.seq = %s"
	sessions := make([]*session, psqlWriters)
	for i := range sessions {
		sessions[i] = d.session(t, "")
	}
	var mu sync.Mutex
	var errs []error
	for k := 0; k < phases; k++ {
		var wg sync.WaitGroup
		// lateFirst writers try the old epoch first, racing the others'
		// first write under the new one; the rest write under the new
		// epoch first.
		turn := func(writer string, lateFirst bool, try func(e int, seq int) error) {
			defer wg.Done()
			for i := 0; i < writesPerTurn; i++ {
				e := k
				if (i%2 == 1) != lateFirst && k > 0 {
					e = k - 1 // a deposed leader's late write
				}
				err := try(e, k*100+i)
				mu.Lock()
				switch {
				case err == nil:
				case errors.Is(err, storageguard.ErrStale) && e < k:
					stale++
				default:
					errs = append(errs, fmt.Errorf("%s phase %d epoch %d: %w", writer, k, e, err))
				}
				mu.Unlock()
			}
		}
		for g := 0; g < goWriters; g++ {
			wg.Add(1)
			writer := fmt.Sprintf("go%d", g)
			go turn(writer, g == 1, func(e, seq int) error {
				err := f.Tx(ctx, res, phaseEpoch(e), func(tx pgx.Tx) error {
					if err := pgtrigger.Present(ctx, tx, tokens[e]); err != nil {
						return err
					}
					// A write to the guarded table first, then the
					// counter: the fence row is locked before the
					// counter's row, always in that order.
					if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (writer, seq, term, n) VALUES ($1, $2, $3, NULL)", writer, seq, phaseEpoch(e).Term); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, fmt.Sprintf(number, "$1", "$2"), writer, seq)
					return err
				})
				if r := pgtrigger.Refusal(err); r != nil {
					return r
				}
				return err
			})
		}
		for p, s := range sessions {
			wg.Add(1)
			writer := fmt.Sprintf("psql%d", p)
			go turn(writer, p == 1, func(e, seq int) error {
				st, _ := s.Run(fmt.Sprintf(`BEGIN;
SET LOCAL termfence.token = '%s';
INSERT INTO %s (writer, seq, term, n) VALUES ('%s', %d, %d, NULL);
\if :ERROR
ROLLBACK;
\else
%s;
COMMIT;
\endif`, tokens[e], table, writer, seq, phaseEpoch(e).Term, fmt.Sprintf(number, "'"+writer+"'", fmt.Sprint(seq))))
				switch st {
				case "00000":
					return nil
				case pgtrigger.CodeStale:
					return storageguard.ErrStale
				}
				return fmt.Errorf("SQLSTATE %s", st)
			})
		}
		wg.Wait()
	}
	for _, err := range errs {
		t.Error(err)
	}
	return stale
}

// TestLeaderChangeGoAndPsql: Go writers through pgfence.Tx and psql writers
// through the guard write one table while leadership moves through six
// epochs, each deposed leader still trying: no write under an older epoch
// commits after one under a newer epoch. The same workload on a table
// without the guard (psql writes unchecked, Go writes still through
// pgfence) must break that, or the checker proves nothing.
func TestLeaderChangeGoAndPsql(t *testing.T) {
	psqlBin(t)
	d := newDB(t)
	for _, table := range []string{"ledger", "unguarded"} {
		d.exec(t, "CREATE TABLE "+table+" (writer text NOT NULL, seq int NOT NULL, term bigint NOT NULL, n bigint, PRIMARY KEY (writer, seq))")
	}
	d.install(t, d.config("ledger"))

	stale := runLeaderChange(t, d, "ledger", "ledger")
	bad, byKind := checkCommitOrder(t, d, "ledger")
	for _, v := range bad {
		t.Errorf("write #%d by %s under term %d committed after write #%d under term %d", v.n, v.writer, v.term, v.afterN, v.afterTerm)
	}
	if byKind["go"] < phases || byKind["psql"] < phases || stale == 0 {
		t.Fatalf("workload too weak to prove anything: %v committed writes by kind, %d stale refusals", byKind, stale)
	}
	if n := d.count(t, "SELECT count(*) FROM ledger WHERE n IS NULL"); n != 0 {
		t.Fatalf("%d writes committed without their commit number", n)
	}
	if h := d.highest(t, "ledger"); h != phaseEpoch(phases-1) {
		t.Fatalf("fence = %v, want %v", h, phaseEpoch(phases-1))
	}
	t.Logf("guarded: %v committed writes, %d stale attempts refused, no write under an older epoch after a newer one", byKind, stale)

	runLeaderChange(t, d, "unguarded", "control")
	bad, _ = checkCommitOrder(t, d, "unguarded")
	if len(bad) == 0 {
		t.Fatal("control without the guard: the checker found no late write, so it cannot tell a fenced table from an unfenced one")
	}
	// (Go writers' late writes may count too: psql's unchecked writes do
	// not raise the fence row either.)
	t.Logf("control without the guard: %d late writes found", len(bad))
}
