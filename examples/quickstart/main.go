// Command quickstart is the program of the README's "Using it": one node
// elects itself, leads with the epoch it won, and writes through a fence
// that refuses a deposed leader's token. Run it with a key of at least 32
// bytes in TERMFENCE_KEY:
//
//	TERMFENCE_KEY=$(head -c 32 /dev/urandom | base64) go run ./examples/quickstart
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"

	"github.com/termfence/termfence/election"
	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/boltfence"
	"github.com/termfence/termfence/transport"
)

func main() {
	if err := run(context.Background(), os.Stdout, os.Getenv("TERMFENCE_KEY")); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, out io.Writer, key string) error {
	// One secret: the leaders sign with it, the storage verifies with it.
	codec, err := epoch.NewHMAC([]byte(key))
	if err != nil {
		return fmt.Errorf("TERMFENCE_KEY: %w", err)
	}
	dir, err := os.MkdirTemp("", "termfence-quickstart")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// The service: one node of a Raft group. In production Bootstrap lists
	// three or five servers, each with its own transport and data dir.
	tr, err := transport.NewTCP("127.0.0.1:0", "", transport.Config{})
	if err != nil {
		return err
	}
	el, err := election.New(election.Config{
		ID: "node-a", Cluster: "payments", DataDir: filepath.Join(dir, "raft"),
		Transport: tr, Bootstrap: []election.Server{{ID: "node-a", Addr: string(tr.LocalAddr())}},
		Signer: codec,
	})
	if err != nil {
		tr.Close()
		return err
	}
	defer el.Close()

	// The storage: a fence that keeps the highest epoch per resource, on
	// disk, and a Guard that verifies tokens before the fence sees them.
	fence, err := boltfence.Open(filepath.Join(dir, "fence.db"))
	if err != nil {
		return err
	}
	defer fence.Close()
	guard := storageguard.NewGuard(fence, storageguard.GuardConfig{Cluster: "payments", Verifier: codec})

	ctx, done := context.WithCancel(ctx)
	err = el.Lead(ctx, func(ctx context.Context, ep epoch.Epoch) error {
		defer done() // one round is enough for this program
		tok, err := el.Token()
		if err != nil {
			return err // no longer leader
		}
		// The write runs only if the storage has seen no newer epoch, in
		// the same step as the check.
		err = guard.Do(ctx, "orders", tok, func(ctx context.Context, ep epoch.Epoch) error {
			fmt.Fprintln(out, "wrote order 1 under", ep)
			return nil
		})
		if err != nil {
			return err
		}
		// A successor wins the next term and writes...
		next := epoch.Epoch{Cluster: "payments", Term: ep.Term + 1, Leader: "node-b"}
		nextTok, err := codec.Sign(next)
		if err != nil {
			return err
		}
		if err := guard.Do(ctx, "orders", nextTok, nil); err != nil {
			return err
		}
		// ...and this leader's late write is refused, not applied.
		err = guard.Do(ctx, "orders", tok, func(ctx context.Context, ep epoch.Epoch) error {
			return errors.New("a stale write ran")
		})
		fmt.Fprintln(out, "late write refused:", errors.Is(err, storageguard.ErrStale))
		return nil
	})
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
