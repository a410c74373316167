package storageguard

import (
	"fmt"

	"github.com/termfence/termfence/epoch"
)

// ErrNestedRaise is returned by a call made from inside a write on the same
// resource (with the context the write was given, or one derived from it)
// that would have to raise the resource's epoch. A raise waits for the
// writes under the older epoch to end, the enclosing write among them, so
// it would wait for itself for good; the in-process fences (Memory, Cached,
// boltfence, dirfence) refuse it at once instead, and change nothing.
// Nested calls that need no raise (same epoch, Check, Highest) are served.
var ErrNestedRaise = fmt.Errorf("storageguard: raise inside a write on the same resource")

func nestedRaise(resource string, ep epoch.Epoch) error {
	return fmt.Errorf("%w: %q to %s", ErrNestedRaise, resource, ep)
}
