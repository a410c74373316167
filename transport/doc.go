// Package transport provides Raft transports that are safe to elect on with
// termfence: TCP with optional mutual TLS ([NewTCP], [MutualTLS]), in-memory
// for tests and single-process demos ([NewInmem]), a fault-injecting wrapper
// for tests ([NewFaulty]), and [MainLoopOnly], which makes any raft
// transport safe. Package election takes one as its Config.Transport.
//
//	tlsCfg, err := transport.MutualTLS("node-a.crt", "node-a.key", "cluster-ca.crt")
//	if err != nil { ... }
//	tr, err := transport.NewTCP(":7000", "node-a.internal:7000", transport.Config{TLS: tlsCfg})
//	if err != nil { ... }
//	defer tr.Close()
//	// pass tr as election.Config.Transport
//
// Each node's certificate names its Raft server ID as the URI SAN
// urn:termfence:server:<ID> ([ServerIDURIPrefix]); without TLS the transport
// is plain TCP.
//
// # Guarantees
//
//   - No Transport built here runs raft's heartbeat fast path
//     (hashicorp/raft#695), which would change a node's state and term off
//     raft's main goroutine. Heartbeats therefore wait behind raft's disk
//     writes: keep LeaderLeaseTimeout well above an fsync.
//   - With Config.TLS, both ends of every connection present a certificate
//     from the cluster CA that names exactly one server ID, or the connection
//     is refused before any RPC is read; an RPC claiming another ID than its
//     certificate's never reaches raft.
//   - Inbound requests are bounded before they are decoded (Config.MaxRPCSize,
//     MaxRPCPayload, MaxRPCEntries), so decoding allocates in proportion to
//     the bytes received; inbound connections are capped (Config.MaxInbound)
//     and deadlined, so a flood of idle connections costs no proven one.
//   - NewTCP returns a working transport or an error with nothing left
//     listening; Close closes every connection and waits for its goroutines.
//   - Faulty's partitions are exact: once Isolate or Cut returns, no new RPC
//     crosses the cut.
//
// # What it does not guarantee
//
//   - Plain TCP has no authentication and no encryption: use it only on a
//     trusted network.
//   - Identity is the certificate, not the address: a stolen member key is
//     that member; use a CA per cluster. Certificates are read once.
//   - NewTCP replicates without raft's pipeline (which can deadlock in raft
//     v1.7.2): a bulk of entries replicates more slowly than raw raft's.
//   - Inmem is not a network: nothing is serialised.
//
// docs/DESIGN.md has the rest: every guarantee and non-guarantee in full
// ("The transport package in full"), with the tests that show each.
package transport
