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

// WriteOnce runs a fence's Do: run drives the transactions (retrying them
// as it must), and the body it is given calls write in the first attempt
// only. Once write has run under the fence row's lock its error is the
// result, even if ending the transaction failed afterwards, and a retried
// attempt does not run it again.
func WriteOnce[Tx any](ctx context.Context, write func(context.Context) error, run func(body func(Tx) error) error) error {
	ran := false
	var werr error
	err := run(func(Tx) error {
		if ran {
			return nil
		}
		ran = true
		werr = write(ctx)
		return werr
	})
	if ran {
		return werr
	}
	return err
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
