package pgfence_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/pgfence"
)

// The seed's paused leader: node-a writes under term 33, node-b is elected
// with term 34 and writes, then node-a wakes and tries again. Its write is
// refused and never commits. (Needs a PostgreSQL server: set
// TERMFENCE_POSTGRES_DSN. Compiled, not run, by go test.)
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("TERMFENCE_POSTGRES_DSN"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	f, err := pgfence.Open(ctx, pool)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS files (id TEXT PRIMARY KEY, content TEXT NOT NULL)"); err != nil {
		log.Fatal(err)
	}
	write := func(e epoch.Epoch, content string) error {
		return f.Tx(ctx, "files/report", e, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO files VALUES ('report', $1) ON CONFLICT (id) DO UPDATE SET content = $1", content)
			return err
		})
	}
	a := epoch.Epoch{Cluster: "payments", Term: 33, Leader: "node-a"}
	b := epoch.Epoch{Cluster: "payments", Term: 34, Leader: "node-b"}
	fmt.Println(write(a, "from a"))
	fmt.Println(write(b, "from b"))
	err = write(a, "late write from a")
	fmt.Println(errors.Is(err, storageguard.ErrStale))
}

// ExampleOpenWith: a leader's service whose database role may write
// termfence_fence but does not own it, on a database where
// storageguard/pgtrigger guards tables, signs each transaction's epoch:
// the token travels with BEGIN, so the fence row can be raised (a raise
// needs the epoch's token there) and writes to guarded tables need no
// pgtrigger.Present. (Compiled, not run, by go test.)
func ExampleOpenWith() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("TERMFENCE_POSTGRES_DSN"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	codec, err := epoch.NewHMAC([]byte(os.Getenv("TERMFENCE_KEY"))) // the key pgtrigger.Install stored
	if err != nil {
		log.Fatal(err)
	}
	f, err := pgfence.OpenWith(ctx, pool, pgfence.Options{Signer: codec})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	b := epoch.Epoch{Cluster: "payments", Term: 34, Leader: "node-b"}
	err = f.Tx(ctx, "ledger", b, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE ledger SET amount = amount + 1 WHERE id = 'a'")
		return err
	})
	fmt.Println(err)
}
