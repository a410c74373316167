// Package election is leader election on hashicorp/raft in which the leader
// holds its Raft term as a fencing token, an epoch.
//
// A node is created with [New] from a [Config]: a transport from package
// transport, a data directory for raft-boltdb, and the first members. The
// node Raft elects confirms its win, then hands out an [epoch.Epoch]
// (Cluster, Term, Leader) from [Election.Epoch] (or a signed string from
// [Election.Token]). Send that epoch with every write to a resource guarded
// by package storageguard, which refuses any epoch older than the newest it
// has seen: the fence, not the election, is what stops a deposed leader.
//
//	tr, err := transport.NewTCP(":7000", "node-a.internal:7000", transport.Config{})
//	if err != nil { ... }
//	el, err := election.New(election.Config{
//		ID: "node-a", Cluster: "payments", DataDir: "/var/lib/payments/raft",
//		Transport: tr,
//		Bootstrap: []election.Server{ // the same list on each first voter
//			{ID: "node-a", Addr: "node-a.internal:7000"},
//			{ID: "node-b", Addr: "node-b.internal:7000"},
//			{ID: "node-c", Addr: "node-c.internal:7000"},
//		},
//	})
//	if err != nil { ... }
//	defer el.Close()
//	// Lead calls fn once for each epoch this node wins, with that epoch;
//	// fn's context ends when the node is seen to lose it.
//	err = el.Lead(ctx, func(ctx context.Context, ep epoch.Epoch) error {
//		return store.Write(ctx, ep, record) // the store fences on ep
//	})
//
// [Election.Observe] and [Election.WaitLeader] report who leads;
// [Election.LeadRole] elects owners of named roles on the same group, each
// with its own epoch; [Election.AddVoter], [Election.AddNonvoter] and
// [Election.RemoveServer] change the membership; [Election.Health] serves
// liveness and readiness probes. Run three voters: two survive nothing.
//
// # Guarantees
//
//   - An epoch is handed out only by the node that won the election for its
//     term, and only while that node is still leader of that very term:
//     every Epoch and Token call checks, and fails with [ErrNotLeader]
//     otherwise.
//   - Epochs only grow, across restarts too: terms are fsynced before use
//     (not with Config.InMemory, which is for tests).
//   - [Election.Lead] never runs fn twice at once, nor with an epoch this
//     node does not hold when fn starts.
//   - Only members move the term: every RPC passes an admission layer
//     before raft sees it, and none crashes a node.
//   - Raft never waits for this package, and Close ends every goroutine it
//     started.
//
// # What it does not guarantee
//
//   - A paused leader (GC pause, SIGSTOP, VM freeze) still believes it leads
//     until it runs again. Only the fence at the resource protects against
//     that: an epoch is a claim to present, not a licence to skip the fence.
//   - Lead's context is cancelled after the fact, not in time: fn may be in
//     the middle of a write when it ends.
//   - Over plain TCP anyone who can reach the port can claim a member's
//     identity; only mutual TLS (transport.MutualTLS) binds it.
//   - Failover time is a measurement (docs/PERFORMANCE.md), not a promise.
//
// docs/DESIGN.md has the rest: each guarantee and non-guarantee in full
// ("The election package in full"), the invariants they rest on, the
// failure model, membership changes and the smallest safe deployments.
package election
