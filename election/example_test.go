package election_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

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
		Logger:    slog.New(slog.DiscardHandler),
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

// A read replica: node "b" joins as a non-voter (it replicates and follows
// the leader but never leads), and redirects a client to the leader's
// application URL, which every node advertises as its Config.Meta.
func ExampleElection_AddNonvoter() {
	ta, tb := transport.NewInmem("a"), transport.NewInmem("b")
	ta.Connect(tb)
	tb.Connect(ta)
	a, err := election.New(election.Config{
		ID: "a", Cluster: "payments", InMemory: true, Transport: ta,
		Bootstrap: []election.Server{{ID: "a", Addr: "a"}},
		Meta:      "https://a.payments.example:8443",
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	// No Bootstrap: b joins. A node records its Config.Meta when it leads,
	// which a non-voter never does (AddMember can record one for it).
	b, err := election.New(election.Config{
		ID: "b", Cluster: "payments", InMemory: true, Transport: tb,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := a.WaitLeader(ctx); err != nil {
		log.Fatal(err)
	}
	if err := a.AddNonvoter(ctx, "b", "b"); err != nil {
		log.Fatal(err)
	}
	// b learns who leads, then where the leader serves.
	for l := range b.Observe(ctx) {
		if l.LeaderMeta != "" {
			break
		}
	}

	// A request reaches b, which cannot act as leader: redirect it.
	if _, err := b.Epoch(); err != nil {
		var nl *election.NotLeaderError
		if errors.As(err, &nl) {
			fmt.Println("307 Temporary Redirect, Location:", nl.LeaderMeta)
		}
	}
	members, err := a.Members()
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range members {
		fmt.Printf("%s voter=%v meta=%q\n", m.ID, m.Voter, m.Meta)
	}
	// Output:
	// 307 Temporary Redirect, Location: https://a.payments.example:8443
	// a voter=true meta="https://a.payments.example:8443"
	// b voter=false meta=""
}

// Logging through log/slog: raft's own logs are adapted onto the same
// logger, with its state-transition chatter below Info, so at Info a
// healthy node logs only what matters — its first election is not a
// warning (here without timestamps, for a stable output).
func ExampleConfig_logger() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level: slog.LevelInfo,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	el, err := election.New(election.Config{
		ID:        "node-a",
		Cluster:   "payments",
		InMemory:  true,
		Transport: transport.NewInmem("node-a"),
		Bootstrap: []election.Server{{ID: "node-a", Addr: "node-a"}},
		Logger:    logger.With("node", "node-a"),
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := el.WaitLeader(ctx); err != nil {
		log.Fatal(err)
	}
	if err := el.Close(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// level=INFO msg="epoch confirmed" node=node-a cluster=payments term=2 leader=node-a
}
