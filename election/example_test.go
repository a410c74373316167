package election_test

import (
	"context"
	"fmt"
	"log"

	"github.com/hashicorp/go-hclog"

	"github.com/termfence/termfence/election"
	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/transport"
)

// A single-node cluster, in memory: the node elects itself, Lead runs the
// leader's work with its epoch, and the work stamps that epoch on what it
// writes.
func ExampleElection_Lead() {
	el, err := election.New(election.Config{
		ID:        "node-a",
		Cluster:   "payments",
		InMemory:  true, // tests and demos only: terms are not durable
		Transport: transport.NewInmem("node-a"),
		Bootstrap: []election.Server{{ID: "node-a", Addr: "node-a"}},
		Logger:    hclog.NewNullLogger(),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer el.Close()

	ctx, stop := context.WithCancel(context.Background())
	err = el.Lead(ctx, func(ctx context.Context, ep epoch.Epoch) error {
		// Leader-only work goes here. Send ep (or el.Token()) with every
		// write, to a resource that keeps the highest epoch it has seen.
		fmt.Println("leading with epoch", ep)
		tok, err := el.Token()
		fmt.Println("token:", tok, err)
		stop() // done for this example: ends Lead
		return nil
	})
	fmt.Println("Lead returned:", err)
	// Output:
	// leading with epoch payments/2/node-a
	// token: payments/2/node-a <nil>
	// Lead returned: context canceled
}
