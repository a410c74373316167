package storageguard

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/termfence/termfence/epoch"
)

// TxFence is a Fence that can also run the caller's own database
// transaction together with the check and raise of an epoch, so that the
// fence and the data commit or roll back as one: sqlfence.Fence is a
// TxFence[*sql.Tx], pgfence.Fence a TxFence[pgx.Tx]. A wrapper that keeps
// Tx (fencemetrics.WrapTx) is one too.
type TxFence[T any] interface {
	Fence
	// Tx runs fn in one transaction with the check of ep for resource and,
	// if ep is newer, its raise; refusals are returned without calling fn.
	Tx(ctx context.Context, resource string, ep epoch.Epoch, fn func(T) error) error
}

// ErrNoTx is returned by Tx when the Guard's fence has no Tx method for the
// transaction type fn takes: build the Guard on a TxFence of that type.
var ErrNoTx = errors.New("storageguard: the guard's fence has no Tx for this transaction type")

// Tx verifies token as Guard.Do does and, only if it is authentic, runs fn
// in the fence's own transaction (TxFence.Tx) under the token's epoch: the
// check, a raise and fn's writes commit together or not at all. fn gets the
// transaction and the admitted epoch; it may run more than once (the fence
// retries serialization failures), so it must have no effects outside tx.
//
// It is one call where the alternative is two on two objects
// (Guard.Verify, then the fence's Tx), and it keeps every refusal where
// the metrics see it: the Guard's own reach GuardConfig.OnRefuse, the
// fence's reach a wrapper such as fencemetrics.WrapTx when the Guard was
// built on one. (Go has no generic methods; hence a function, not a
// method of Guard.)
//
// Tx returns fn's error, or the refusal without calling fn: those of
// Guard.Do, ErrNoTx if the Guard's fence has no Tx for T, and an error
// wrapping ErrBadConfig for a nil fn.
func Tx[T any](ctx context.Context, g *Guard, resource, token string, fn func(tx T, ep epoch.Epoch) error) error {
	if err := g.Err(); err != nil {
		return err
	}
	f, ok := g.fence.(TxFence[T])
	if !ok {
		return fmt.Errorf("%w: %T has no Tx(ctx, resource, epoch, func(%v) error)", ErrNoTx, g.fence, reflect.TypeFor[T]())
	}
	if fn == nil {
		return fmt.Errorf("%w: Tx needs a non-nil fn", ErrBadConfig)
	}
	ep, err := g.admit(resource, token)
	if err != nil {
		return err
	}
	return f.Tx(ctx, resource, ep, func(tx T) error { return fn(tx, ep) })
}
