// Package transport provides Raft transports that are safe to elect on with
// termfence: TCP with optional mutual TLS (NewTCP, MutualTLS), in-memory for
// tests and single-process demos (NewInmem), a fault-injecting wrapper for
// tests (NewFaulty), and MainLoopOnly, which makes any raft transport safe.
//
// # Guarantees
//
//   - No Transport built here runs raft's heartbeat fast path.
//     hashicorp/raft's NetworkTransport would handle heartbeats on a
//     connection goroutine that changes the node's state and term off raft's
//     main goroutine (hashicorp/raft#695), which breaks termfence's
//     (state, term) triple read (invariant I2 in docs/DESIGN.md). One
//     wrapper, MainLoopOnly, owns that rule: NewTCP, NewInmem and NewFaulty
//     all go through it, so SetHeartbeatHandler is a no-op on every
//     Transport here, and heartbeats arrive on Consumer() like every other
//     RPC. The cost: heartbeats wait behind raft's main-loop disk writes, so
//     keep LeaderLeaseTimeout well above an fsync.
//   - With Config.TLS from MutualTLS, both ends of every connection present
//     a certificate that verifies against the cluster CA, or the connection
//     is refused before any RPC is read: a node without such a certificate
//     can neither vote, append entries, nor be replicated to.
//   - NewTCP either returns a working transport or an error with nothing
//     left listening. Close stops listening and closes every connection the
//     transport accepted or dialled.
//   - Faulty's partitions are exact: once Isolate or Cut returns, no new RPC
//     crosses the cut in either direction, and an outbound one fails at once
//     with ErrPartitioned.
//
// # Non-guarantees
//
//   - Plain TCP (Config.TLS nil) has no authentication and no encryption:
//     anyone who can reach the port can disrupt the cluster (for example by
//     sending a higher term). Use it only on a trusted network.
//   - MutualTLS identifies peers by CA, not by address or name: any
//     certificate the CA signed is a peer. Use a CA per cluster. Certificate
//     files are read once; rotating them needs a new transport (or your own
//     tls.Config with GetCertificate).
//   - Cut knows an inbound RPC's sender only by its RPCHeader.Addr (raft
//     always fills it); a hand-made RPC that names no sender passes a Cut,
//     though not Isolate.
//   - An RPC already on the wire when a Faulty partition starts completes.
//     Faulty disables pipelined replication (every AppendEntries is a
//     separate round trip) and drops or delays only this node's outbound
//     RPCs; cut both nodes, or Isolate, for symmetric loss.
//   - Inmem is not a network: nothing is serialised, and an RPC waits at
//     most 500ms for the peer.
package transport
