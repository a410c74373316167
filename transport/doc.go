// Package transport provides Raft transports that are safe to elect on with
// termfence: TCP (optionally mutual TLS), in-memory, and a fault-injecting
// wrapper for tests.
//
// Guarantee: no Transport built here runs raft's heartbeat fast path.
// hashicorp/raft's NetworkTransport would otherwise handle heartbeats on a
// connection goroutine that changes the node's state and term off raft's
// main goroutine (hashicorp/raft#695), which breaks termfence's (state, term)
// triple read. SetHeartbeatHandler is a no-op on every Transport here, and
// heartbeats arrive on Consumer() like every other RPC.
package transport
