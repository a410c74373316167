// Package txretry drives the transactions of the SQL fences
// (storageguard/sqlfence and storageguard/pgfence): one attempt under a shared lock, an
// exclusive one when the epoch must be raised, and bounded retries of
// serialization failures with backoff. The fences supply the attempts and
// say which errors are worth another try.
package txretry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/termfence/termfence/storageguard"
)

// ErrNeedRaise is returned by a shared attempt that found the presented
// epoch newer than the highest: Run then raises under the exclusive lock.
var ErrNeedRaise = errors.New("txretry: raise needed")

// Attempt runs one transaction. exclusive: lock the fence row for a raise
// (creating it if missing). withFn: run the caller's function in the
// transaction; false only for a raise committed on its own.
type Attempt func(exclusive, withFn bool) error

// Run calls attempt until it succeeds or fails for good. After ErrNeedRaise
// it attempts exclusively: when raiseInTx, with the caller's function in the
// same transaction; otherwise it first commits the raise alone (so that it is
// durable before the function runs) and then goes back to a shared attempt.
// Errors for which retryable is true are retried, with backoff, until
// maxAttempts; then the error is returned as who + " gave up after N
// attempts: " + the error.
func Run(ctx context.Context, attempt Attempt, raiseInTx bool, retryable func(error) bool, maxAttempts int, who string) error {
	exclusive := false
	for attempts := 0; ; {
		var err error
		if exclusive && !raiseInTx {
			if err = attempt(true, false); err == nil {
				exclusive = false
				continue
			}
		} else {
			err = attempt(exclusive, true)
		}
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrNeedRaise):
			exclusive = true
			continue
		case retryable(err):
			attempts++
			if attempts >= maxAttempts {
				return fmt.Errorf("%s gave up after %d attempts: %w", who, attempts, err)
			}
			if err := Backoff(ctx, attempts); err != nil {
				return err
			}
			continue
		}
		return err
	}
}

// Hold runs a fence's Do: write runs at most once, inside the transaction
// that holds the fence row's lock, and the transaction then commits even
// when write failed. The fence transaction of a Do writes nothing (a raise
// was committed on its own before), so committing it only ends it; but a
// commit that succeeds proves that the database session, and with it the
// lock, lasted until write had returned. A commit that fails (the session
// was terminated, timed out, or lost its link while write ran) means a
// newer epoch may have been admitted beside write: Result then returns an
// error matching storageguard.ErrFenceLost, never write's nil.
type Hold[Tx any] struct {
	ctx   context.Context
	write func(context.Context) error
	ran   bool
	werr  error
}

// NewHold returns the hold of one Do call: write gets ctx.
func NewHold[Tx any](ctx context.Context, write func(context.Context) error) *Hold[Tx] {
	return &Hold[Tx]{ctx: ctx, write: write}
}

// errRanAlready is returned by a Body called again after write ran; Run
// never does that (Retryable stops it), this is a defence.
var errRanAlready = errors.New("txretry: the write already ran")

// Body is the function the fence runs in its transaction: write in the
// first attempt that gets there, then nil so that the transaction commits.
func (h *Hold[Tx]) Body(Tx) error {
	if h.ran {
		return errRanAlready
	}
	h.ran = true
	h.werr = h.write(h.ctx)
	return nil
}

// Ran reports whether write has run.
func (h *Hold[Tx]) Ran() bool { return h.ran }

// Retryable wraps a fence's retryable: once write has run nothing is
// retried, since a failure after it is the end of the transaction that
// held the fence, and its error is what Result must see.
func (h *Hold[Tx]) Retryable(retryable func(error) bool) func(error) bool {
	return func(err error) bool { return !h.ran && retryable(err) }
}

// Result is Do's result given err, what the fence's Run returned: err if
// write never ran (a refusal, or a failure to get in); write's own result
// if the transaction that held the fence committed; otherwise an error
// matching storageguard.ErrFenceLost that wraps the commit's failure and
// write's error, if any.
func (h *Hold[Tx]) Result(err error) error {
	if !h.ran {
		return err
	}
	if err == nil {
		return h.werr
	}
	lost := fmt.Errorf("%w: the transaction holding the fence did not commit after the write: %w", storageguard.ErrFenceLost, err)
	if h.werr != nil {
		return errors.Join(h.werr, lost)
	}
	return lost
}

// Retry runs op until it succeeds, fails with an error retryable does not
// accept, or has run maxAttempts times.
func Retry(ctx context.Context, op func() error, retryable func(error) bool, maxAttempts int) error {
	for attempts := 1; ; attempts++ {
		err := op()
		if err == nil || !retryable(err) || attempts >= maxAttempts {
			return err
		}
		if err := Backoff(ctx, attempts); err != nil {
			return err
		}
	}
}

// Backoff waits before retry number attempt: a random time in [d/2, d]
// with d = 2^attempt ms, at most 128 ms; or until ctx ends.
func Backoff(ctx context.Context, attempt int) error {
	d := time.Millisecond << min(attempt, 7)
	d = d/2 + rand.N(d/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
