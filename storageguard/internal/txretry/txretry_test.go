package txretry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/termfence/termfence/storageguard"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errBusy = errors.New("busy")

func isBusy(err error) bool { return errors.Is(err, errBusy) }

// script returns an Attempt that records its calls and returns results in
// order (nil once they run out).
func script(results ...error) (Attempt, *[]string) {
	var calls []string
	return func(exclusive, withFn bool) error {
		calls = append(calls, fmt.Sprintf("excl=%v fn=%v", exclusive, withFn))
		if len(results) == 0 {
			return nil
		}
		err := results[0]
		results = results[1:]
		return err
	}, &calls
}

func TestRunRaise(t *testing.T) {
	ctx := context.Background()
	// Raise committed alone, then the function under a shared lock.
	a, calls := script(ErrNeedRaise, nil, nil)
	if err := Run(ctx, a, false, isBusy, 3, "x"); err != nil {
		t.Fatal(err)
	}
	if want := []string{"excl=false fn=true", "excl=true fn=false", "excl=false fn=true"}; !slices.Equal(*calls, want) {
		t.Fatalf("raise alone: calls %v, want %v", *calls, want)
	}
	// Raise in the function's own transaction.
	a, calls = script(ErrNeedRaise, nil)
	if err := Run(ctx, a, true, isBusy, 3, "x"); err != nil {
		t.Fatal(err)
	}
	if want := []string{"excl=false fn=true", "excl=true fn=true"}; !slices.Equal(*calls, want) {
		t.Fatalf("raise in tx: calls %v, want %v", *calls, want)
	}
}

func TestRunRetriesThenGivesUp(t *testing.T) {
	ctx := context.Background()
	a, calls := script(errBusy, errBusy, nil)
	if err := Run(ctx, a, true, isBusy, 3, "x"); err != nil || len(*calls) != 3 {
		t.Fatalf("two busy then ok: err %v after %d calls", err, len(*calls))
	}
	a, calls = script(errBusy, errBusy, errBusy, errBusy)
	err := Run(ctx, a, true, isBusy, 3, "fence:")
	if !errors.Is(err, errBusy) || !strings.HasPrefix(err.Error(), "fence: gave up after 3 attempts") || len(*calls) != 3 {
		t.Fatalf("always busy: %v after %d calls", err, len(*calls))
	}
	other := errors.New("refused")
	a, calls = script(other)
	if err := Run(ctx, a, true, isBusy, 3, "x"); err != other || len(*calls) != 1 {
		t.Fatalf("a final error: %v after %d calls", err, len(*calls))
	}
}

func TestRetryAndBackoffStopOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Backoff(ctx, 7); !errors.Is(err, context.Canceled) {
		t.Fatalf("Backoff on a cancelled context = %v", err)
	}
	n := 0
	err := Retry(ctx, func() error { n++; return errBusy }, isBusy, 5)
	if !errors.Is(err, context.Canceled) || n != 1 {
		t.Fatalf("Retry on a cancelled context: %v after %d calls", err, n)
	}
	n = 0
	err = Retry(context.Background(), func() error { n++; return errBusy }, isBusy, 2)
	if !errors.Is(err, errBusy) || n != 2 {
		t.Fatalf("Retry: %v after %d calls, want busy after 2", err, n)
	}
}

// TestHold: write runs in the first attempt only and the transaction then
// commits; if that commit fails (the session that held the fence is gone)
// the result matches storageguard.ErrFenceLost and never is write's nil;
// nothing is retried once write ran; if write never ran, run's error is
// the result.
func TestHold(t *testing.T) {
	ctx := context.Background()
	errWrite, errCommit := errors.New("write"), errors.New("commit")
	for _, c := range []struct {
		name      string
		writeErr  error
		attempts  int   // how many times run calls the body
		runErr    error // what run returns afterwards (the commit's error)
		want      []error
		wantLost  bool
		wantRuns  int
		wantRetry bool // Retryable(always) after the attempts
	}{
		{"once", nil, 1, nil, nil, false, 1, false},
		{"commit failed after write", nil, 1, errCommit, []error{errCommit}, true, 1, false},
		{"write failed, committed", errWrite, 1, nil, []error{errWrite}, false, 1, false},
		{"write failed, commit failed", errWrite, 1, errCommit, []error{errWrite, errCommit}, true, 1, false},
		{"called again", nil, 2, nil, nil, false, 1, false},
		{"never reached write", nil, 0, errCommit, []error{errCommit}, false, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			runs := 0
			h := NewHold[int](ctx, func(context.Context) error { runs++; return c.writeErr })
			var bodyErrs []error
			for range c.attempts {
				bodyErrs = append(bodyErrs, h.Body(0))
			}
			if len(bodyErrs) > 0 && bodyErrs[0] != nil {
				t.Fatalf("first Body = %v, want nil (commit)", bodyErrs[0])
			}
			if len(bodyErrs) > 1 && bodyErrs[1] == nil {
				t.Fatal("Body ran the write again")
			}
			err := h.Result(c.runErr)
			if c.want == nil && err != nil {
				t.Fatalf("error %v, want nil", err)
			}
			for _, w := range c.want {
				if !errors.Is(err, w) {
					t.Fatalf("error %v does not match %v", err, w)
				}
			}
			if got := errors.Is(err, storageguard.ErrFenceLost); got != c.wantLost {
				t.Fatalf("error %v: matches ErrFenceLost %v, want %v", err, got, c.wantLost)
			}
			if runs != c.wantRuns {
				t.Fatalf("write ran %d times, want %d", runs, c.wantRuns)
			}
			if got := h.Retryable(func(error) bool { return true })(errCommit); got != c.wantRetry {
				t.Fatalf("Retryable after the attempts = %v, want %v", got, c.wantRetry)
			}
		})
	}
}
