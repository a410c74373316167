package electionmetrics_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/termfence/termfence/election"
	"github.com/termfence/termfence/election/electionmetrics"
	"github.com/termfence/termfence/transport"
)

// Exporting an election's metrics: one line, then serve reg with promhttp.
func ExampleMustRegister() {
	el, err := election.New(election.Config{
		ID: "node-a", Cluster: "payments", InMemory: true,
		Transport: transport.NewInmem("node-a"),
		Bootstrap: []election.Server{{ID: "node-a", Addr: "node-a"}},
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer el.Close()
	reg := prometheus.NewRegistry()
	electionmetrics.MustRegister(reg, el) // the one line

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := el.WaitLeader(ctx); err != nil {
		log.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "termfence_election_leader", "termfence_election_term":
			fmt.Println(mf.GetName(), mf.GetMetric()[0].GetGauge().GetValue())
		case "termfence_election_confirm_duration_seconds":
			fmt.Println(mf.GetName(), "count", mf.GetMetric()[0].GetHistogram().GetSampleCount())
		}
	}
	// Output:
	// termfence_election_confirm_duration_seconds count 1
	// termfence_election_leader 1
	// termfence_election_term 2
}
