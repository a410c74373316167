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
//   - With Config.TLS (build it with MutualTLS), both ends of every
//     connection present a certificate that verifies against the cluster
//     CA for both the server-auth and the client-auth usage and names
//     exactly one Raft server ID (URI SAN urn:termfence:server:<ID>,
//     ServerIDURIPrefix), or the connection is refused before any RPC is
//     read: a client-only certificate from the cluster CA, one that names
//     no server, or none at all can neither vote, append entries, send
//     TimeoutNow, nor be replicated to. An inbound RPC whose header claims
//     another server ID than its connection's certificate names is answered
//     with ErrIdentityMismatch and never reaches raft; a dial reaches only
//     the server raft meant (the peer's certificate must name it).
//   - Inbound requests are bounded before they are decoded: at most
//     Config.MaxRPCSize bytes (8 MiB), MaxRPCPayload per string or byte
//     slice (1 MiB), MaxRPCEntries elements per msgpack array or map (1024),
//     followed on the bytes as they arrive; a connection that breaks a cap
//     is closed before raft's decoder reads the offending bytes
//     (InboundStats.FrameRefused). Decoding therefore allocates in
//     proportion to the bytes received (TestEightMiBFrame: an 8 MiB
//     frame of 8 M one-byte maps costs 0.03x its size, where raft's own
//     decoder alone allocates 161x).
//   - Inbound connections are bounded: at most Config.MaxInbound at once (a
//     new one evicts first one still in its handshake, then one that has
//     proven nothing, the longest idle first; over TLS only a current
//     member's certificate proves anything, see SetMembership), HandshakeTimeout to finish
//     the TLS handshake (plain TCP: to send a first byte), IdleTimeout
//     without a byte, and each response write bounded by Timeout. A flood
//     of idle or half-open connections costs the cluster no connection it
//     has proven (TestInboundFloodKeepsCluster).
//   - Outbound RPCs are hashicorp/raft's NetworkTransport's (wire format,
//     pool, pipelining), except that a pooled connection the peer closed
//     while it was unused is replaced before the next RPC is written on
//     it, instead of failing that RPC.
//   - NewTCP either returns a working transport or an error with nothing
//     left listening. Close stops listening and closes every connection the
//     transport accepted or dialled, and waits for its own goroutines.
//   - Faulty's partitions are exact: once Isolate or Cut returns, no new RPC
//     crosses the cut in either direction, and an outbound one fails at once
//     with ErrPartitioned.
//
// # Non-guarantees
//
//   - Plain TCP (Config.TLS nil) has no authentication and no encryption.
//     An RPC's server ID and address are claims anyone who can reach the
//     port can make: package election refuses strangers and impossible
//     terms, but not a stranger who claims a member's ID and address from
//     that address's IP (the transport compares a claimed IP literal with
//     the connection's source unless Config.AllowAddrMismatch). Use it only
//     on a trusted network.
//   - Identity is the server ID in the certificate, not the address: a
//     stolen member certificate and key is that member. Any peer
//     certificate the CA signs names a server that may join if the leader
//     adds it; use a CA per cluster. Certificate files are read once;
//     rotating them needs a new transport (or your own tls.Config with
//     GetCertificate).
//   - A request within the caps is decoded in memory before package
//     election can refuse it (up to about 2.5 times MaxRPCSize at the
//     defaults, TestLargeHonestFrame). A sender that stops mid-request is
//     cut off after IdleTimeout (TestInboundMalformedFrames). A refused
//     InstallSnapshot's data is never read: its connection is closed; an
//     admitted one's data streams to raft's snapshot store, unbounded by
//     MaxRPCSize. Responses to this node's own RPCs are decoded by raft's
//     NetworkTransport without these caps (they come from the addresses
//     in the configuration).
//   - Eviction under MaxInbound can close a proven connection too, when
//     every open connection is proven (more peers than the cap allows);
//     its next RPC then dials again.
//   - Cut knows an inbound RPC's sender only by its RPCHeader.Addr (raft
//     always fills it); a hand-made RPC that names no sender passes a Cut,
//     though not Isolate.
//   - An RPC already on the wire when a Faulty partition starts completes.
//     Faulty disables pipelined replication (every AppendEntries is a
//     separate round trip) and drops or delays only this node's outbound
//     RPCs; cut both nodes, or Isolate, for symmetric loss.
//   - NewTCP replicates without raft's pipeline: every AppendEntries is a
//     round trip of its own. The pipeline of raft v1.7.2 can deadlock after
//     a follower's Success=false, leaving that follower without entries and
//     Shutdown hung (TestTCPNoPipeline); an election's log is too small to
//     miss it. A bulk of entries replicates more slowly than raw raft's.
//   - Inmem is not a network: nothing is serialised, and an RPC waits at
//     most 500ms for the peer.
package transport
