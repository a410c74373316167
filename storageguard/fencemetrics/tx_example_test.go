package fencemetrics_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	_ "modernc.org/sqlite"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/fencemetrics"
	"github.com/termfence/termfence/storageguard/sqlfence"
)

// Counting the SQL path: a fence with Tx keeps it through WrapTx, and
// storageguard.Tx verifies the token and runs the transaction through the
// wrapper, so ten writes, a stale token and a forged one are all counted.
func ExampleWrapTx() {
	dir, _ := os.MkdirTemp("", "fencemetrics")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", "file:"+filepath.Join(dir, "orders.db")+"?_pragma=journal_mode(WAL)")
	defer db.Close()
	ctx := context.Background()
	_, _ = db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, term INTEGER)`)
	sf, _ := sqlfence.Open(ctx, db, sqlfence.SQLite)

	reg := prometheus.NewRegistry()
	m := fencemetrics.MustNew(reg)
	codec, _ := epoch.NewHMAC([]byte("0123456789abcdef0123456789abcdef"))
	guard := storageguard.NewGuard(fencemetrics.WrapTx[*sql.Tx](m, sf),
		storageguard.GuardConfig{Cluster: "payments", Verifier: codec, OnRefuse: m.Refused})

	insert := func(tok string) error {
		return storageguard.Tx(ctx, guard, "orders", tok, func(tx *sql.Tx, ep epoch.Epoch) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO orders (term) VALUES (?)`, ep.Term)
			return err
		})
	}
	t34, _ := codec.Sign(epoch.Epoch{Cluster: "payments", Term: 34, Leader: "b"})
	t33, _ := codec.Sign(epoch.Epoch{Cluster: "payments", Term: 33, Leader: "a"})
	for range 10 {
		_ = insert(t34)
	}
	fmt.Println("stale:", insert(t33))
	_ = insert(t34[:len(t34)-2] + "xx") // a forged signature: refused by the Guard

	for _, c := range []struct{ op, result string }{{"tx", "admitted"}, {"tx", "stale"}, {"guard", "bad_signature"}} {
		v, _ := gatherValue(reg, c.op, c.result)
		fmt.Printf("decisions{op=%q,result=%q} %v\n", c.op, c.result, v)
	}
	// Output:
	// stale: storageguard: stale epoch for "orders": presented payments/33/a, highest payments/34/b
	// decisions{op="tx",result="admitted"} 10
	// decisions{op="tx",result="stale"} 1
	// decisions{op="guard",result="bad_signature"} 1
}
