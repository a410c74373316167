package election

import (
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/epoch"
)

// The index bounds. hashicorp/raft takes log indexes from its peers as
// unchecked uint64s: one InstallSnapshot at LastLogIndex 2^64-1 makes the
// receiver's next index wrap to 0, after which nothing it appends commits
// again, and a data directory holding that snapshot panics raft.NewRaft at
// the next start. A role's epoch is the log index of its grant
// (Epoch.Term), so an index above epoch.MaxTerm would also make every later
// grant's epoch fail epoch.Validate. So:
//
//   - no log index in an RPC (PrevLogEntry, an entry's index,
//     LeaderCommitIndex, a vote's LastLogIndex, a snapshot's LastLogIndex
//     and ConfigurationIndex) is above MaxIndex;
//   - a snapshot, the one RPC that can move a node's last index by more
//     than one batch of entries, is at most IndexJumpLimit.
//
// An append moves the receiver's last index by at most MaxEntries: raft
// stores its entries only once PrevLogEntry matches its own log. So even a
// cluster that a forged snapshot (a voter's claim) moved up to
// IndexJumpLimit has 2^40 entries left before its role epochs stop
// validating: at a million entries a second, twelve days; at the rate an
// election group appends (role grants, metadata, the application's FSM
// commands), far longer. An honest cluster reaches IndexJumpLimit after
// 2^48 - 2^40 entries: 89 years at 100,000 a second.
//
// Unlike a term, a higher index costs no election: a node that took a
// snapshot far ahead wins the next election with the longest log (or
// follows the leader) and the others take its snapshot; the cluster goes
// on from that index (TestAttackSnapshotIndexAtLimit).
const (
	// MaxIndex is the highest log index an RPC may name: epoch.MaxTerm,
	// the highest role epoch that validates.
	MaxIndex = epoch.MaxTerm
	// IndexJumpLimit is the highest LastLogIndex an InstallSnapshot may
	// carry: MaxIndex - 2^40.
	IndexJumpLimit = MaxIndex - 1<<40
)

// indexes applies the index bounds to rpc: nil if every log index in it is
// admissible.
func indexes(rpc raft.RPC, e *RefusedError) *RefusedError {
	tooHigh := func(field string, v, limit uint64) *RefusedError {
		e.Reason = RefusedIndexTooHigh
		e.Detail = fmt.Sprintf("%s %d above %d", field, v, limit)
		return e
	}
	switch c := rpc.Command.(type) {
	case *raft.AppendEntriesRequest:
		if c.PrevLogEntry > MaxIndex {
			return tooHigh("PrevLogEntry", c.PrevLogEntry, MaxIndex)
		}
		if c.LeaderCommitIndex > MaxIndex {
			return tooHigh("LeaderCommitIndex", c.LeaderCommitIndex, MaxIndex)
		}
		// Entries follow PrevLogEntry one by one (content); each is
		// checked here too, so this rule holds whatever the order.
		if uint64(len(c.Entries)) > MaxIndex-c.PrevLogEntry {
			return tooHigh("the last entry's index", c.PrevLogEntry+uint64(len(c.Entries)), MaxIndex)
		}
		for _, l := range c.Entries {
			if l != nil && l.Index > MaxIndex {
				return tooHigh("an entry's index", l.Index, MaxIndex)
			}
		}
	case *raft.RequestVoteRequest:
		if c.LastLogIndex > MaxIndex {
			return tooHigh("LastLogIndex", c.LastLogIndex, MaxIndex)
		}
	case *raft.RequestPreVoteRequest:
		if c.LastLogIndex > MaxIndex {
			return tooHigh("LastLogIndex", c.LastLogIndex, MaxIndex)
		}
	case *raft.InstallSnapshotRequest:
		if c.LastLogIndex > IndexJumpLimit {
			return tooHigh("the snapshot's LastLogIndex", c.LastLogIndex, IndexJumpLimit)
		}
		if c.ConfigurationIndex > IndexJumpLimit {
			return tooHigh("the snapshot's ConfigurationIndex", c.ConfigurationIndex, IndexJumpLimit)
		}
	}
	return nil
}
