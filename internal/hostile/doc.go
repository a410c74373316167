// Package hostile turns bytes into sequences of hostile Raft RPCs: what a
// peer that is not a member, or a member that lies, can send a node of a
// termfence cluster. The election package's live-cluster fuzz target
// (FuzzLiveCluster) and the fault suite's hostile peer (internal/cmd/forge,
// driven by internal/chaos) both draw their RPCs from Generate, so a
// finding of one is a case of the other.
//
// Guarantees: Generate is deterministic (the same bytes and View give the
// same operations), never panics, and covers every RPC hashicorp/raft
// v1.7.2 decodes (AppendEntries, RequestVote, RequestPreVote,
// InstallSnapshot, TimeoutNow) plus raw frames (unknown RPC types, huge
// msgpack counts, oversized payloads, garbage); valid and invalid headers;
// claimed member and stranger identities; extreme terms; nil and malformed
// entries and configurations. Each Op says whether a correct node must
// refuse it whatever its state (MustRefuse): a claim of no identity, of a
// stranger, of the target itself, or malformed content.
//
// Non-guarantees: an Op with MustRefuse false may be admitted or refused;
// over plain TCP a claimed member identity with sane content is
// indistinguishable from the member (docs/DESIGN.md).
package hostile
