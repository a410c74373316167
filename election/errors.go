package election

import (
	"errors"
	"fmt"
)

var (
	// ErrNotLeader is returned when an operation needs this node to hold a
	// confirmed epoch (Epoch, Token) or to be the Raft leader (AddVoter,
	// RemoveServer, TransferTo) and it does not. The error is a
	// *NotLeaderError naming the leader this node knows of, if any, so a
	// caller can forward the request.
	ErrNotLeader = errors.New("election: not leader")

	// ErrNoLeader is matched (in addition to ErrNotLeader) by a
	// *NotLeaderError when this node knows of no leader at all: an election
	// is under way or this node is cut off.
	ErrNoLeader = errors.New("election: no known leader")

	// ErrClosed is returned by every method called after Close, and by
	// Lead and WaitLeader when Close ends them.
	ErrClosed = errors.New("election: closed")

	// ErrInvalidConfig is returned by Config.Validate and New for an unusable
	// Config; the message names the field.
	ErrInvalidConfig = errors.New("election: invalid config")

	// ErrDataDirLocked is returned by New when DataDir's Raft store is held
	// open by another process (or another Election in this process): bbolt's
	// file lock could not be taken within a second.
	ErrDataDirLocked = errors.New("election: data dir in use")

	// ErrUnknownServer is returned by TransferTo for an ID that is not another
	// voter in the current Raft configuration, and by RemoveServer for an ID
	// that is not a member.
	ErrUnknownServer = errors.New("election: unknown server")

	// ErrInvalidArgument is returned for an unusable argument: an ID that is
	// not a valid name (epoch.ValidateName) or an empty address given to
	// AddVoter or RemoveServer, a nil fn given to Lead.
	ErrInvalidArgument = errors.New("election: invalid argument")

	// ErrInvalidAddress is returned (together with ErrInvalidArgument) by
	// AddVoter, AddNonvoter and AddMember for a member address that is
	// empty or, on a network transport, not host:port.
	ErrInvalidAddress = errors.New("election: invalid member address")

	// ErrDuplicateMember is returned by AddVoter, AddNonvoter and AddMember
	// when the ID is already a member at another address, the address
	// already belongs to another member, or a non-voter would replace a
	// voter. The configuration is left as it was.
	ErrDuplicateMember = errors.New("election: duplicate member")

	// ErrLastVoter is returned by RemoveServer for the only voter of the
	// cluster: without a voter the cluster could never elect again.
	ErrLastVoter = errors.New("election: refusing to remove the last voter")

	// ErrTransfer is returned by Resign when there is no other voter to hand
	// leadership to, and by Resign and TransferTo when ctx ended while raft's
	// transfer attempts kept failing (the error then also wraps ctx's error
	// and names raft's last error).
	ErrTransfer = errors.New("election: leadership transfer failed")
)

// NotLeaderError is the error for "this node is not the leader". It matches
// ErrNotLeader via errors.Is, and also ErrNoLeader when LeaderID is empty.
// LeaderID and LeaderAddr name the leader this node currently knows of, so a
// caller can forward the request; they are Raft's view, which may already be
// out of date.
type NotLeaderError struct {
	LeaderID   string // empty: no known leader
	LeaderAddr string // its Raft address
	// LeaderMeta is the metadata the leader advertises (its Config.Meta,
	// typically its application URL, as replicated to this node): where to
	// redirect a client. Empty if it advertises none or it has not reached
	// this node yet.
	LeaderMeta string
}

// Error implements error.
func (e *NotLeaderError) Error() string {
	if e.LeaderID == "" {
		return "election: not leader (no known leader)"
	}
	return fmt.Sprintf("election: not leader (leader is %s at %s)", e.LeaderID, e.LeaderAddr)
}

// Is reports whether target is ErrNotLeader, or ErrNoLeader when no leader
// is known.
func (e *NotLeaderError) Is(target error) bool {
	return target == ErrNotLeader || (target == ErrNoLeader && e.LeaderID == "")
}

var _ error = (*NotLeaderError)(nil)
