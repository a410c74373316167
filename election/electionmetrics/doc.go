// Package electionmetrics exports an election.Election's figures to
// Prometheus, and bridges hashicorp/raft's own go-metrics into the same
// registry. It is apart from package election so that only a user who opts
// in links client_golang; the one line is
//
//	electionmetrics.MustRegister(reg, el) // reg: a *prometheus.Registry
//
// and, once per process, RegisterRaft(reg) for raft's own metrics.
//
// The metrics (subsystem "election", no constant labels: the scraper names
// the node):
//
//	termfence_election_leader                        gauge: 1 while this node holds a confirmed epoch
//	termfence_election_term                          gauge: the current Raft term
//	termfence_election_epoch_transitions_total       counter, label transition="confirmed"|"withdrawn"
//	termfence_election_confirm_duration_seconds      histogram: Raft made this node leader → epoch published
//	termfence_election_leaderless_seconds_total      counter: time this node knew no leader
//	termfence_election_admission_admitted_total      counter: RPCs the admission layer handed to raft
//	termfence_election_admission_refused_total       counter, label reason: RPCs it refused
//
// and, when the election's transport is one from transport.NewTCP (its Raft
// port; subsystem "transport"):
//
//	termfence_transport_inbound_open                 gauge: inbound Raft connections open now
//	termfence_transport_inbound_accepted_total       counter: inbound connections accepted
//	termfence_transport_inbound_dropped_total        counter, label reason="evicted"|"handshake_failed"|"idle_closed"|"claim_refused"
//
// # Guarantees
//
//   - Values are read from Election.Stats at scrape time: a scrape never
//     waits on raft and costs the election nothing between scrapes.
//   - Counters only grow for the life of the Election; after Close the
//     figures stay at their last values.
//
// # Non-guarantees
//
//   - Several Elections in one process need one registry each (or
//     prometheus.WrapRegistererWith with a label of your choosing); the
//     names collide otherwise.
//   - raft's go-metrics are process-global: RegisterRaft bridges them from
//     every raft in the process into one registry, under raft's own names
//     (raft_...), and works once per process.
package electionmetrics
