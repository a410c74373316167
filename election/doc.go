// Package election is leader election on hashicorp/raft in which the leader
// holds its Raft term as a fencing token, an epoch.
//
// A node is created with [New] and a [Config] (a transport from package
// transport, a data dir for raft-boltdb). The node Raft elects confirms its
// win and then hands out [epoch.Epoch]{Cluster, Term, Leader} from
// [Election.Epoch] (or a signed string from [Election.Token]). The
// application sends that epoch with every write to a resource guarded by
// package storageguard, which refuses any epoch older than the newest it
// has seen. [Election.Lead] runs leader-only work under a context tied to
// one epoch; [Election.Observe] and [Election.WaitLeader] report who leads.
//
// Each node may advertise metadata with its membership ([Config.Meta],
// typically the URL of its application API). It travels in the Raft log, so
// every node can tell where the leader serves ([Leadership.LeaderMeta],
// [Status]) and a refused call's [NotLeaderError] carries it: a follower
// redirects a client without an address book of its own. Membership is
// changed with [Election.AddVoter], [Election.AddNonvoter] (a member that
// replicates and follows but never votes or leads), [Election.AddMember]
// and [Election.RemoveServer], which refuse unusable input — an address
// that is not host:port, a duplicate ID or address, the last voter — with
// [ErrInvalidAddress], [ErrDuplicateMember] or [ErrLastVoter] before raft
// sees it, leaving the configuration as it was.
//
// Logs go to a *slog.Logger ([Config.Logger]; raft's hclog is adapted
// inside, its Info chatter below slog's Info), so at Info a healthy cluster
// logs only this package's own few lines and a clean Close no ERROR line.
// [Election.Health] is an http.Handler for liveness and readiness probes:
// not ready while no leader is known, not live once that has lasted
// [HealthConfig].NoLeaderTimeout or Raft has made this node leader without
// a confirmed epoch for ConfirmTimeout.
//
// # Smallest safe deployments
//
// Raft needs a majority of the voters. Three voters (two application
// replicas and a small third voting member will do) survive the loss of any
// one; two voters survive nothing, and two voters plus a non-voter are
// still two voters: a non-voter never votes, never counts towards a quorum
// and never leads, so when one voter goes the other cannot be elected and
// the non-voter cannot take over. A tie-breaking witness must be a voter.
// See docs/DESIGN.md, "Smallest safe deployments".
//
// # Guarantees
//
//   - An epoch is handed out only by the node that won the election for
//     that term (invariant I1 in docs/DESIGN.md). On every leadership
//     signal (raft's NotifyCh, drained by a goroutine that never blocks
//     raft) the node waits until an entry of its new term is committed
//     (raft's own no-op; a Barrier if that takes longer than
//     ElectionTimeout) and then does the triple read — CurrentTerm,
//     State == Leader, CurrentTerm, both equal — before it publishes the
//     term. The term is never read after the fact from LeaderCh, which
//     would let a node that has just stepped down hand out the next
//     leader's term.
//   - An epoch stops the moment its node steps down: every Epoch and Token
//     call repeats the triple read (three atomic loads) and fails with
//     ErrNotLeader unless the node is, at that instant, leader of the very
//     term it published.
//   - Epochs only grow. Raft elects at most one leader per term, terms are
//     persisted (fsynced) before they are used and survive restarts, so no
//     two nodes ever hold epochs with the same term and a restarted cluster
//     continues above every term it used before. The in-memory mode
//     (Config.InMemory) gives this up and is for tests only.
//   - Raft never waits for this package: NotifyCh is buffered and drained at
//     once, observers are non-blocking, and Observe subscribers hold only the
//     latest value.
//   - Lead never runs fn twice at once and never starts it with an epoch
//     this node does not hold at that moment.
//   - The triple read is sound because raft changes its term and state only
//     on its main goroutine: New hands raft the transport through
//     transport.MainLoopOnly, which switches the heartbeat fast path off
//     (hashicorp/raft#695, invariant I2), whatever Transport it is given —
//     even a raw raft.NetworkTransport.
//   - Only members move the term, and no RPC crashes a node. Every RPC from
//     the transport passes an admission layer before raft sees it, which
//     admits exactly docs/DESIGN.md's definition of a valid RPC
//     (Election.Admission counts what it refused, and why): it must name a
//     server ID and address, not this node's ID, and keep every term inside
//     the term window (TermWindow, JumpLimit: no RPC moves the term more than
//     2^32, and 2^40 elections of headroom stay below epoch.MaxTerm) and
//     every log index at most MaxIndex, a snapshot's at most IndexJumpLimit
//     (role epochs are log indexes: 2^40 entries of headroom); votes
//     and pre-votes are taken only from a voter of the latest configuration
//     at its configured address, appends and snapshots only from a voter
//     (from anyone while this node has no configuration yet, as raft does
//     when it joins; votes then only from the server that appended to it
//     last), TimeoutNow only from the leader this node follows, and only by
//     a voter; no nil entry, unknown entry type, out-of-order index or
//     configuration that does not decode to a valid one reaches raft. The
//     terms of the responses to this node's own RPCs pass the same window;
//     one beyond it is taken on a quorum of the other voters' answers, so a
//     node left behind catches up. Refused RPCs are answered with a
//     *RefusedError.
//   - A refused connection to a silent leader forces an election (a
//     TimeoutNow to this node's own raft, skipping pre-vote) only once a
//     majority of the voters has lost the leader; a non-voter never starts
//     an election.
//   - Close ends every goroutine this package started and returns even if
//     raft leaves a future unanswered at shutdown; the one goroutine that can
//     then remain is a helper waiting on that abandoned future.
//
// # Non-guarantees
//
//   - A paused leader (GC pause, SIGSTOP, VM freeze) still believes it leads
//     and its Epoch still succeeds until it runs again and learns otherwise:
//     nothing inside the process can notice a pause that happens between a
//     check and a write. Only the fence at the resource protects against
//     that; an epoch is a claim to present, not a licence to skip the fence.
//   - The cancellation of Lead's context is a best-effort notice after the
//     fact, not a bound: a partitioned leader notices only after
//     LeaderLeaseTimeout, and fn may be in the middle of a write. fn must
//     stop when its context ends, and every write must still carry the
//     epoch.
//   - A follower's Leadership.Term is its own current term, not proof that
//     the named leader won it.
//   - LeaderMeta is what the leader advertised, as replicated to this node:
//     it can lag behind a leader change by one log entry (Observe delivers
//     the new value when it arrives), and a member's metadata is known only
//     once it led or AddMember recorded it. It is a hint for redirecting
//     clients, never an authority: the epoch is.
//   - Cancelling the context of a call that wraps a raft future (Resign,
//     TransferTo, AddVoter, RemoveServer) stops the wait, not the operation,
//     which raft may still complete.
//   - The admission layer checks what an RPC claims. Over plain TCP anyone
//     who can reach the port can claim a member's ID and address; only
//     mutual TLS (transport.MutualTLS) binds the claim to a certificate.
//     A node that joins trusts the first leader that appends to it. A
//     malicious member is inside the trust boundary: a voter may win an
//     election and lead (docs/DESIGN.md, "What a malicious member can still
//     do").
//   - Failover time is a measurement (docs/PERFORMANCE.md), not a promise.
//     With LeaderLeaseTimeout below HeartbeatTimeout each node wakes raft
//     as soon as its leader has been silent for HeartbeatTimeout, or, when
//     the leader's port refuses connections, as soon as a majority has
//     found it silent and refusing; this changes when raft holds an
//     election, never how. It can cost an election while the leader lives
//     if a majority finds it silent and refusing. The Election owns raft's
//     HeartbeatTimeout for this: do not change it through
//     Raft().ReloadConfig.
package election
