package pgtrigger_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/pgfence"
	"github.com/termfence/termfence/storageguard/pgtrigger"
)

// The seed's paused leader, with the ledger table guarded inside the
// database: node-b (term 34) writes through pgfence, and then node-a
// (term 33), deposed while paused, writes the way a batch job or psql
// would — and the database refuses it. (Needs a PostgreSQL server: set
// TERMFENCE_POSTGRES_DSN. Compiled, not run, by go test.)
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("TERMFENCE_POSTGRES_DSN"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	key := []byte(os.Getenv("TERMFENCE_KEY")) // the cluster's HMAC key, 32 bytes or more
	codec, err := epoch.NewHMAC(key)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS ledger (id text PRIMARY KEY, amount bigint NOT NULL)"); err != nil {
		log.Fatal(err)
	}
	// Once, by the table's owner (a migration): from now on every write to
	// ledger needs a current token, whoever sends it.
	err = pgtrigger.Install(ctx, pool, pgtrigger.Config{
		Table: "ledger", Resource: "ledger", Cluster: "payments", HMACKey: key,
	})
	if err != nil {
		log.Fatal(err)
	}

	// node-b, the current leader, writes through pgfence's Tx and presents
	// its token to the guard in the same transaction.
	f, err := pgfence.Open(ctx, pool)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	b := epoch.Epoch{Cluster: "payments", Term: 34, Leader: "node-b"}
	tokB, _ := codec.Sign(b)
	err = f.Tx(ctx, "ledger", b, func(tx pgx.Tx) error {
		if err := pgtrigger.Present(ctx, tx, tokB); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO ledger VALUES ('b', 100) ON CONFLICT (id) DO UPDATE SET amount = 100")
		return err
	})
	fmt.Println(err)

	// node-a wakes up and writes without pgfence, as psql would:
	//   BEGIN; SET LOCAL termfence.token = '<its token>'; UPDATE ...; COMMIT;
	a := epoch.Epoch{Cluster: "payments", Term: 33, Leader: "node-a"}
	tokA, _ := codec.Sign(a)
	tx, err := pgtrigger.Begin(ctx, pool, tokA)
	if err != nil {
		log.Fatal(err)
	}
	_, err = tx.Exec(ctx, "UPDATE ledger SET amount = 0")
	tx.Rollback(ctx)
	fmt.Println(errors.Is(pgtrigger.Refusal(err), storageguard.ErrStale))
}

// A refusal from the guard, as a Go writer gets it from pgx, turned into
// storageguard's error with the epochs the guard named.
func ExampleRefusal() {
	fromDB := &pgconn.PgError{
		Code:    pgtrigger.CodeStale,
		Message: `termfence: stale epoch for "ledger": presented payments/33/node-a, highest payments/34/node-b (UPDATE on public.ledger refused)`,
		Detail:  "presented: payments/33/node-a\nhighest: payments/34/node-b\nresource: ledger",
	}
	err := pgtrigger.Refusal(fmt.Errorf("update ledger: %w", fromDB))
	var stale *storageguard.StaleError
	fmt.Println(errors.Is(err, storageguard.ErrStale), errors.As(err, &stale))
	fmt.Println(stale.Resource, stale.Presented, stale.Highest)
	fmt.Println(pgtrigger.Refusal(errors.New("connection refused")))
	// Output:
	// true true
	// ledger payments/33/node-a payments/34/node-b
	// <nil>
}

// ExampleAudit lists what weakens a guarded table: grants of TRIGGER or of
// fence-table writes, roles that can act as an owner or read the key,
// AllowPlain, partitions added after Install. (Needs a PostgreSQL server:
// set TERMFENCE_POSTGRES_DSN. Compiled, not run, by go test.)
func ExampleAudit() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("TERMFENCE_POSTGRES_DSN"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	weaknesses, err := pgtrigger.Audit(ctx, pool, "ledger")
	if err != nil {
		log.Fatal(err)
	}
	for _, w := range weaknesses {
		fmt.Println(w) // e.g. "trigger-privilege: TRIGGER on public.ledger is granted to batch: ..."
	}
}
