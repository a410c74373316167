package storageguard

import (
	"fmt"

	"github.com/termfence/termfence/epoch"
)

// Decision is the outcome of the admission rule for one presented epoch.
type Decision struct {
	// Highest is the resource's highest epoch after admission.
	Highest epoch.Epoch
	// Raise is true when the presented epoch is newer than the previous
	// highest, so Highest must be stored (durably) before the write.
	Raise bool
}

// Decide is the admission rule, a pure function: given the highest epoch a
// resource has accepted (zero if none) and the presented one, it returns the
// new highest, or why presented is refused:
//
//   - invalid or zero presented: an error wrapping epoch.ErrMalformed;
//   - another cluster than highest's: *ForeignError (ErrForeignCluster);
//   - older term: *StaleError (ErrStale);
//   - same term, another leader: *ConflictError (ErrConflict);
//   - same epoch: accepted, no raise;
//   - newer term: accepted, raise.
//
// Every fence applies exactly this rule.
func Decide(resource string, highest, presented epoch.Epoch) (Decision, error) {
	if err := ValidateResource(resource); err != nil {
		return Decision{}, err
	}
	if err := presented.Validate(); err != nil {
		return Decision{}, fmt.Errorf("storageguard: presented epoch: %w", err)
	}
	if highest.IsZero() {
		return Decision{Highest: presented, Raise: true}, nil
	}
	if presented.Cluster != highest.Cluster {
		return Decision{}, &ForeignError{Resource: resource, Presented: presented, Cluster: highest.Cluster}
	}
	switch {
	case presented.Term < highest.Term:
		return Decision{}, &StaleError{Resource: resource, Presented: presented, Highest: highest}
	case presented.Term > highest.Term:
		return Decision{Highest: presented, Raise: true}, nil
	case presented.Leader != highest.Leader:
		return Decision{}, &ConflictError{Resource: resource, Presented: presented, Highest: highest}
	}
	return Decision{Highest: highest}, nil
}

// ValidateResource refuses an empty resource name or one longer than
// MaxResourceLen. Any other byte string is a valid name; fences that map
// names to files or keys encode them.
func ValidateResource(resource string) error {
	if resource == "" {
		return fmt.Errorf("%w: empty", ErrBadResource)
	}
	if len(resource) > MaxResourceLen {
		return fmt.Errorf("%w: %d bytes, more than %d", ErrBadResource, len(resource), MaxResourceLen)
	}
	return nil
}
