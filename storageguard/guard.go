package storageguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"

	"github.com/termfence/termfence/epoch"
)

// GuardConfig configures a Guard. The zero value is valid but refuses every
// token: a Guard needs a Verifier; see Verifier.
type GuardConfig struct {
	// Cluster is the election group whose tokens the Guard admits. A token of
	// another cluster is refused with a *ForeignError (ErrForeignCluster)
	// before the fence is touched. Empty: no cluster check here beyond the
	// fence's own, which refuses an epoch of another cluster than the one it
	// first accepted for the resource.
	Cluster string
	// Verifier turns tokens into epochs. Use epoch.NewHMAC or
	// epoch.NewEd25519Verifier wherever tokens cross a trust boundary.
	// Accepting tokens unauthenticated is a choice to spell out:
	// epoch.Plain() checks the form only and verifies nothing (it takes even
	// a signed token at its word), so any client can then present any
	// epoch, including a forged huge term that locks real leaders out for
	// good. Nil (or a nil pointer) is no choice: the Guard refuses every
	// token with ErrNoVerifier (which matches ErrUnauthenticated), and
	// NewGuard logs a warning (slog.Default).
	Verifier epoch.Verifier
	// OnRefuse, if set, is called with every token the Guard refuses before
	// the fence is touched (missing, unsigned or badly signed, malformed, of
	// another cluster, for a bad resource name), by Verify as by Do, Admit,
	// Check and Tx, from the calling goroutine; it must not block. Refusals by the fence itself (stale, conflicting
	// epochs) are the fence's to report. Package storageguard/fencemetrics
	// counts them with it. Nil: nothing is called.
	OnRefuse func(resource string, err error)
	// ClusterFor, if set, names the cluster whose tokens a resource takes,
	// in place of Cluster: a store that serves many roles of one election
	// group (each role's epochs carry "<cluster>.<role>") maps each
	// resource to its role's cluster, so a role's token on another role's
	// resource is refused as foreign (see RoleClusters). An empty result
	// means Cluster. It is called on every request from the calling
	// goroutine, and must be fast and must not block.
	ClusterFor func(resource string) string
}

// Validate reports whether c is usable: Cluster, if set, must be a valid
// epoch name. The error wraps ErrBadConfig.
func (c GuardConfig) Validate() error {
	if c.Cluster != "" {
		if err := epoch.ValidateName(c.Cluster); err != nil {
			return fmt.Errorf("%w: cluster: %v", ErrBadConfig, err)
		}
	}
	return nil
}

// Guard admits requests that carry tokens from the wire into a Fence. It
// verifies each token (signature, form, cluster) first, and only then asks
// the fence. A Guard is safe for concurrent use; it holds no state of its own
// beyond its config, so several Guards may share one fence.
type Guard struct {
	fence    Fence
	cluster  string
	verifier epoch.Verifier
	err      error // non-nil: every call fails with it
	onRefuse func(resource string, err error)
	// clusterFor: GuardConfig.ClusterFor (guard_roles.go).
	clusterFor func(resource string) string
}

// NewGuard returns a Guard in front of f. It never panics: a nil f (or a nil
// pointer in a Fence interface) makes every call fail with ErrNoFence, and an
// invalid cfg makes every call fail with its Validate error. cfg is copied.
func NewGuard(f Fence, cfg GuardConfig) *Guard {
	g := &Guard{fence: f, cluster: cfg.Cluster, verifier: cfg.Verifier, onRefuse: cfg.OnRefuse, clusterFor: cfg.ClusterFor}
	if err := cfg.Validate(); err != nil {
		g.err = err
	}
	if isNilFence(f) {
		g.err = ErrNoFence
	}
	if isNilVerifier(g.verifier) {
		g.verifier = noVerifier{}
		slog.Warn("storageguard: Guard has no Verifier: every token is refused; set GuardConfig.Verifier (epoch.Plain() to accept tokens unauthenticated)")
	}
	return g
}

// noVerifier is the Verifier of a Guard built without one: it refuses
// every token.
type noVerifier struct{}

func (noVerifier) Verify(string) (epoch.Epoch, error) { return epoch.Epoch{}, ErrNoVerifier }

func isNilVerifier(v epoch.Verifier) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

func isNilFence(f Fence) bool {
	if f == nil {
		return true
	}
	v := reflect.ValueOf(f)
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// Err reports why g cannot work, or nil: ErrNoFence for a nil Guard or one
// built without a fence, the Validate error (ErrBadConfig) for one built
// from an invalid config. Every call on such a Guard fails with it; handlers
// built on a Guard check it once, when they are built.
func (g *Guard) Err() error {
	if g == nil {
		return ErrNoFence
	}
	return g.err
}

// Verify turns token into an epoch without touching the fence: it refuses an
// empty token with ErrUnauthenticated, a malformed one with an error wrapping
// epoch.ErrMalformed, an unsigned or badly signed one (under a signing
// Verifier) with an error wrapping both ErrUnauthenticated and the epoch
// package's cause (epoch.ErrUnsigned, epoch.ErrBadSignature), and an epoch of
// another cluster than GuardConfig.Cluster with a *ForeignError. resource
// only names the resource in a ForeignError. Like every refusal of the
// Guard, a refusal here is passed to GuardConfig.OnRefuse.
func (g *Guard) Verify(resource, token string) (epoch.Epoch, error) {
	ep, err := g.verify(resource, token)
	if err != nil && g != nil && g.onRefuse != nil {
		g.onRefuse(resource, err)
	}
	return ep, err
}

func (g *Guard) verify(resource, token string) (epoch.Epoch, error) {
	if err := g.Err(); err != nil {
		return epoch.Epoch{}, err
	}
	if token == "" {
		return epoch.Epoch{}, fmt.Errorf("%w: no token", ErrUnauthenticated)
	}
	ep, err := g.verifier.Verify(token)
	switch {
	case err == nil:
	case errors.Is(err, ErrNoVerifier):
		return epoch.Epoch{}, err
	case errors.Is(err, epoch.ErrUnsigned), errors.Is(err, epoch.ErrBadSignature):
		return epoch.Epoch{}, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	case errors.Is(err, epoch.ErrMalformed):
		return epoch.Epoch{}, fmt.Errorf("storageguard: token: %w", err)
	default:
		// A custom Verifier with an error of its own: the token did not
		// verify, so it is not authenticated.
		return epoch.Epoch{}, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	if err := ep.Validate(); err != nil {
		// A custom Verifier returned an invalid epoch without an error.
		return epoch.Epoch{}, fmt.Errorf("storageguard: token: %w", err)
	}
	if want := g.clusterOf(resource); want != "" && ep.Cluster != want {
		return epoch.Epoch{}, &ForeignError{Resource: resource, Presented: ep, Cluster: want}
	}
	return ep, nil
}

// admit checks everything that needs no fence: the guard itself, the
// resource name and the token.
func (g *Guard) admit(resource, token string) (epoch.Epoch, error) {
	err := g.Err()
	if err == nil {
		err = ValidateResource(resource)
	}
	var ep epoch.Epoch
	if err == nil {
		ep, err = g.verify(resource, token)
	}
	if err != nil && g != nil && g.onRefuse != nil {
		g.onRefuse(resource, err)
	}
	return ep, err
}

// Do verifies token (see Verify) and, only if it is authentic, runs write
// under its epoch through the fence's Do: write runs only if the epoch is not
// older than the highest accepted for resource, and no newer epoch is admitted
// for resource until write has returned; writes under the same epoch run
// concurrently. write gets the admitted epoch. A nil write only admits the
// epoch (raising the fence if it is newer), like Admit.
//
// Do returns write's error, or the refusal without calling write:
// ErrBadResource for an empty resource name or one longer than
// MaxResourceLen; ErrUnauthenticated, epoch.ErrMalformed or ErrForeignCluster
// from Verify (the fence is not touched); *StaleError, *ConflictError or
// *ForeignError from the fence; ErrNoFence or ErrBadConfig for a Guard that
// cannot work.
func (g *Guard) Do(ctx context.Context, resource, token string, write func(ctx context.Context, ep epoch.Epoch) error) error {
	ep, err := g.admit(resource, token)
	if err != nil {
		return err
	}
	if write == nil {
		return g.fence.Admit(ctx, resource, ep)
	}
	return g.fence.Do(ctx, resource, ep, func(ctx context.Context) error {
		return write(ctx, ep)
	})
}

// Admit verifies token and admits its epoch for resource without a write:
// it raises the highest epoch if the token's is newer and refuses it if it is
// older. It returns the admitted epoch. Refusals are those of Do.
func (g *Guard) Admit(ctx context.Context, resource, token string) (epoch.Epoch, error) {
	ep, err := g.admit(resource, token)
	if err != nil {
		return epoch.Epoch{}, err
	}
	if err := g.fence.Admit(ctx, resource, ep); err != nil {
		return epoch.Epoch{}, err
	}
	return ep, nil
}

// Check verifies token and refuses its epoch if it is older than the highest
// accepted for resource, without raising it: use it to fence reads. A read
// that passed Check may be stale by the time it is used. It returns the
// token's epoch. Refusals are those of Do.
func (g *Guard) Check(ctx context.Context, resource, token string) (epoch.Epoch, error) {
	ep, err := g.admit(resource, token)
	if err != nil {
		return epoch.Epoch{}, err
	}
	if err := g.fence.Check(ctx, resource, ep); err != nil {
		return epoch.Epoch{}, err
	}
	return ep, nil
}

// Highest returns the highest epoch the fence has accepted for resource, or
// the zero Epoch if none was.
func (g *Guard) Highest(ctx context.Context, resource string) (epoch.Epoch, error) {
	if err := g.Err(); err != nil {
		return epoch.Epoch{}, err
	}
	if err := ValidateResource(resource); err != nil {
		return epoch.Epoch{}, err
	}
	return g.fence.Highest(ctx, resource)
}
