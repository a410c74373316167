package storageguard

import (
	"errors"
	"fmt"

	"github.com/termfence/termfence/epoch"
)

var (
	// ErrStale is returned when the presented epoch is older than the highest
	// epoch the resource has accepted: its leader was deposed. The error is a
	// *StaleError that names both epochs.
	ErrStale = errors.New("storageguard: stale epoch")
	// ErrConflict is returned when the presented epoch has the same term as the
	// highest but names another leader. Raft elects one leader per term, so
	// this means misconfiguration (two clusters under one name) or a forged
	// token.
	ErrConflict = errors.New("storageguard: conflicting epoch")
	// ErrForeignCluster is returned for an epoch of another election group than
	// the one the resource (or the Guard) belongs to.
	ErrForeignCluster = errors.New("storageguard: epoch from another cluster")
	// ErrUnauthenticated is returned by a Guard for a token that is missing,
	// unsigned or whose signature does not verify.
	ErrUnauthenticated = errors.New("storageguard: unauthenticated token")
	// ErrNoVerifier is returned by a Guard built without a Verifier for
	// every token it is given: an unverified Guard must be asked for
	// (GuardConfig.Verifier = epoch.Plain()), not defaulted to. It matches
	// ErrUnauthenticated.
	ErrNoVerifier = fmt.Errorf("%w: the Guard has no Verifier (set GuardConfig.Verifier; epoch.Plain() accepts tokens unauthenticated)", ErrUnauthenticated)
	// ErrBadResource is returned for an empty resource name or one longer
	// than MaxResourceLen.
	ErrBadResource = errors.New("storageguard: bad resource name")
	// ErrClosed is returned by every call on a closed fence.
	ErrClosed = errors.New("storageguard: fence closed")
	// ErrFenceLost is returned by a fence that admitted an epoch but could
	// not hold the admission for as long as the write ran: the lock or
	// session that kept newer epochs out was lost underneath it (a database
	// session ended, a lock was broken). The write may have run, in part or
	// in full, without the guarantee that no newer epoch was admitted
	// meanwhile; treat its outcome as unknown. Errors that match it may wrap
	// the cause.
	ErrFenceLost = errors.New("storageguard: fence lost during the write")
	// ErrNoFence is returned by every call on a Guard that was built without
	// a fence (a nil Fence), and by handlers built on such a Guard.
	ErrNoFence = errors.New("storageguard: guard has no fence")
	// ErrBadConfig is returned by the Validate methods of configurations
	// (GuardConfig here, and those of the fence packages) and by every call
	// on a Guard built from an invalid config.
	ErrBadConfig = errors.New("storageguard: bad config")
)

// MaxResourceLen is the longest resource name, in bytes.
const MaxResourceLen = 1024

// StaleError reports a refused stale epoch. It matches ErrStale with
// errors.Is.
type StaleError struct {
	Resource  string
	Presented epoch.Epoch
	Highest   epoch.Epoch
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("storageguard: stale epoch for %q: presented %s, highest %s", e.Resource, e.Presented, e.Highest)
}

// Is reports whether target is ErrStale.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// ConflictError reports an epoch with the highest term but another leader.
// It matches ErrConflict with errors.Is.
type ConflictError struct {
	Resource  string
	Presented epoch.Epoch
	Highest   epoch.Epoch
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("storageguard: conflicting epoch for %q: presented %s, highest %s names another leader for the same term", e.Resource, e.Presented, e.Highest)
}

// Is reports whether target is ErrConflict.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// ForeignError reports an epoch of another cluster. It matches
// ErrForeignCluster with errors.Is.
type ForeignError struct {
	Resource  string
	Presented epoch.Epoch
	Cluster   string // the cluster the resource belongs to
}

func (e *ForeignError) Error() string {
	return fmt.Sprintf("storageguard: epoch %s for %q is from another cluster than %q", e.Presented, e.Resource, e.Cluster)
}

// Is reports whether target is ErrForeignCluster.
func (e *ForeignError) Is(target error) bool { return target == ErrForeignCluster }
