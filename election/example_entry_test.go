package election_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/termfence/termfence/election"
	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/transport"
)

// A durable one-voter cluster over TCP: New starts the node, raft-boltdb
// keeps its terms in DataDir, and WaitLeader reports the leader once it has
// a confirmed epoch. A real cluster lists three voters in Bootstrap.
func ExampleNew() {
	dir, err := os.MkdirTemp("", "election-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	tr, err := transport.NewTCP("127.0.0.1:0", "", transport.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	addr := string(tr.LocalAddr())
	el, err := election.New(election.Config{
		ID:        "node-a",
		Cluster:   "payments",
		DataDir:   dir,
		Transport: tr,
		Bootstrap: []election.Server{{ID: "node-a", Addr: addr}},
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer el.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := el.WaitLeader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader:", l.LeaderID)
	// Output: leader: node-a
}

// Named roles on one group: each role has one owner at a time and its own
// fencing epoch (its Cluster is the group's and the role's name), and
// LeadRole runs the role's work while this node holds it.
func ExampleElection_LeadRole() {
	el, err := election.New(election.Config{
		ID:        "node-a",
		Cluster:   "payments",
		InMemory:  true, // tests and demos only: terms are not durable
		Transport: transport.NewInmem("node-a"),
		Bootstrap: []election.Server{{ID: "node-a", Addr: "node-a"}},
		Roles:     []string{"billing"},
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer el.Close()

	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	err = el.LeadRole(ctx, "billing", func(ctx context.Context, ep epoch.Epoch) error {
		// Send ep (or el.RoleToken("billing")) with every write to the
		// role's resource.
		fmt.Println("holding billing as", ep.Leader, "in", ep.Cluster)
		stop()
		return nil
	})
	fmt.Println("LeadRole returned:", err)
	// Output:
	// holding billing as node-a in payments.billing
	// LeadRole returned: context canceled
}
