package storageguard_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

func ExampleNewGuard() {
	codec, err := epoch.NewHMAC([]byte("a shared secret of at least 32 bytes!"))
	if err != nil {
		panic(err)
	}
	g := storageguard.NewGuard(storageguard.NewMemory(), storageguard.GuardConfig{
		Cluster:  "payments",
		Verifier: codec,
	})
	tok, _ := codec.Sign(epoch.Epoch{Cluster: "payments", Term: 34, Leader: "node-b"})
	ep, err := g.Admit(context.Background(), "ledger", tok)
	fmt.Println(ep, err)
	// Output: payments/34/node-b <nil>
}

// Kleppmann's tokens 33 and 34: the paused leader's write is refused, and a
// forged token with a huge term is refused before it can raise the fence.
func ExampleGuard_Do() {
	codec, _ := epoch.NewHMAC([]byte("a shared secret of at least 32 bytes!"))
	g := storageguard.NewGuard(storageguard.NewMemory(), storageguard.GuardConfig{
		Cluster:  "payments",
		Verifier: codec,
	})
	ctx := context.Background()
	write := func(ctx context.Context, ep epoch.Epoch) error {
		fmt.Println("write under", ep)
		return nil
	}
	tok33, _ := codec.Sign(epoch.Epoch{Cluster: "payments", Term: 33, Leader: "node-a"})
	tok34, _ := codec.Sign(epoch.Epoch{Cluster: "payments", Term: 34, Leader: "node-b"})

	fmt.Println(g.Do(ctx, "ledger", tok33, write))
	fmt.Println(g.Do(ctx, "ledger", tok34, write))
	err := g.Do(ctx, "ledger", tok33, write) // node-a wakes from its pause
	fmt.Println(errors.Is(err, storageguard.ErrStale))

	err = g.Do(ctx, "ledger", "payments/99999/mallory", write) // unsigned
	fmt.Println(errors.Is(err, storageguard.ErrUnauthenticated), errors.Is(err, epoch.ErrUnsigned))
	h, _ := g.Highest(ctx, "ledger")
	fmt.Println("highest:", h)
	// Output:
	// write under payments/33/node-a
	// <nil>
	// write under payments/34/node-b
	// <nil>
	// true
	// true true
	// highest: payments/34/node-b
}
