// Command etcdfailover measures how long etcd's leader election
// (go.etcd.io/etcd/client/v3/concurrency.Election) takes to elect a new leader
// when the current leader's process dies, and when it resigns, so that
// termfence's figures in docs/PERFORMANCE.md stand beside a peer's.
//
// It starts a single-member etcd server embedded in the process
// (go.etcd.io/etcd/server/v3/embed) on free loopback ports with its data in a
// temporary directory, then lets -clients clients, each with its own gRPC
// connection and its own session lease, campaign on one election. Each round:
//
//   - crash: after a random delay in [0, TTL) — so the crash falls anywhere in
//     the lease keep-alive cycle — the leader's client connection is closed
//     without resigning and without revoking its lease, as a dead process would
//     leave it. The next leader is elected only when the server expires that
//     lease and deletes the leader's key.
//   - handover: the leader calls Resign, which deletes its key at once.
//
// A sample is the time from the fault to the moment the next client's Campaign
// returns. The retired client is replaced by a fresh one, which queues behind
// the others, so every round starts with -clients campaigners.
//
// What bounds the crash figure (etcd v3.7.3 source): the server raises any
// requested TTL to ceil(1.5 × election-timeout) whole seconds
// (etcdserver/server.go), so concurrency.WithTTL(1) is granted 2 s with etcd's
// default 1 s election timeout and 1 s only with an election timeout of at most
// 666 ms; the client renews the lease every max(TTL/3, 500 ms) rounded up to its
// 500 ms send loop (client/v3/lease.go); and the server looks for expired
// leases every 500 ms (lease/lessor.go runLoop). The program prints the TTL
// the server actually granted.
//
// What it does not measure: the failover of etcd itself. With one member there
// is no etcd leader to lose; a multi-member etcd cluster losing its own leader
// adds etcd's election (about one election timeout) to whatever it is doing.
// Clients and server share one process and one machine; loopback only.
//
// Usage:
//
//	go run ./cmd/etcdfailover [-n 20] [-clients 3] [-ttl 1] [-scenario crash,handover]
//	    [-heartbeat-interval 100] [-election-timeout 1000] [-json FILE] [-seed N] [-v]
package main
