package storageguard

import (
	"context"

	"github.com/termfence/termfence/epoch"
)

// Fence keeps, per resource, the highest epoch it has accepted and refuses
// older ones (docs/DESIGN.md I4, I5). All methods are safe for concurrent
// use.
type Fence interface {
	// Do admits ep for resource and runs write under it, as one step: write
	// runs only if ep is not older than the highest epoch, and no newer epoch
	// is admitted for resource until write has returned. Writes under the same
	// epoch run concurrently. If ep is newer than the highest, it becomes the
	// highest durably before write runs. ctx bounds the wait to get in,
	// never the hold: once write runs, no newer epoch is admitted until it
	// returns, whatever happens to ctx. Do returns write's error, or the
	// refusal (ErrStale, ErrConflict, ErrForeignCluster, epoch.ErrMalformed,
	// ErrBadResource) without calling write, or, from a fence that lost its
	// hold while write ran (a database session ended), an error matching
	// ErrFenceLost.
	Do(ctx context.Context, resource string, ep epoch.Epoch, write func(ctx context.Context) error) error
	// Admit is Do with no write: it raises the highest epoch to ep if ep is
	// newer, and refuses it if it is older.
	Admit(ctx context.Context, resource string, ep epoch.Epoch) error
	// Check refuses ep if it is older than the highest epoch, without raising
	// it. Use it to fence reads; a read that passed Check may still be stale
	// by the time it is used.
	Check(ctx context.Context, resource string, ep epoch.Epoch) error
	// Highest returns the highest epoch accepted for resource, or the zero
	// Epoch if none was.
	Highest(ctx context.Context, resource string) (epoch.Epoch, error)
	// Close releases the fence's resources. Calls after Close fail with
	// ErrClosed.
	Close() error
}
