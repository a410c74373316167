// Package fencemetrics counts a fence's decisions for Prometheus. It is
// apart from package storageguard so that the core links no client_golang;
// a user opts in with one line around the fence (and one in the Guard's
// config for the refusals made before the fence):
//
//	m := fencemetrics.MustNew(reg)
//	fence = m.Wrap(fence)                                   // decisions, raises, hold time
//	guard := storageguard.NewGuard(fence, storageguard.GuardConfig{..., OnRefuse: m.Refused})
//
// A fence whose Tx method runs the caller's transaction with the check
// (sqlfence, pgfence) is wrapped with WrapTx, which keeps Tx and counts it;
// storageguard.Tx then verifies a token and runs the transaction through
// the wrapper, so every path is counted:
//
//	sf := fencemetrics.WrapTx[*sql.Tx](m, sqlFence)
//	guard := storageguard.NewGuard(sf, storageguard.GuardConfig{..., OnRefuse: m.Refused})
//	err := storageguard.Tx(ctx, guard, "orders", token, func(tx *sql.Tx, ep epoch.Epoch) error { … })
//
// The metrics (subsystem "fence", no constant labels):
//
//	termfence_fence_decisions_total{op, result}  counter: op is do, tx, admit, check or guard; result is admitted,
//	                                             stale, conflict, foreign, bad_signature, malformed or error
//	termfence_fence_raises_total                 counter: admissions that raised a resource's highest epoch
//	termfence_fence_hold_seconds                 histogram: how long a Do's write (a Tx's transaction) held the fence
//
// # Guarantees
//
//   - The wrapped fence decides exactly as the fence it wraps: the wrapper
//     only classifies the outcome. Every call is counted once, by its
//     result.
//
// # Non-guarantees
//
//   - Raises are those seen through this wrapper, compared with the highest
//     epoch it last saw per resource (read once from the fence per
//     resource): raises made by other processes sharing the store are
//     theirs to count.
//   - A Guard's refusals before the fence (by Verify, Do, Admit, Check and
//     storageguard.Tx alike) are counted only if its GuardConfig.OnRefuse
//     is m.Refused.
//   - Wrap drops a fence's Tx method (the result is a plain Fence): a
//     program that calls Tx on the fence it wrapped, or on the unwrapped
//     fence, is not counted. Wrap such a fence with WrapTx.
package fencemetrics
