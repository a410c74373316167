package txretry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
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

// TestWriteOnce: write runs in the first attempt only, however often run
// retries the body; once it ran, its result is Do's even when ending the
// transaction failed; if it never ran, run's error is the result.
func TestWriteOnce(t *testing.T) {
	ctx := context.Background()
	errWrite, errCommit := errors.New("write"), errors.New("commit")
	for _, c := range []struct {
		name     string
		writeErr error
		attempts int   // how many times run calls the body
		runErr   error // what run returns afterwards
		want     error
		wantRuns int
	}{
		{"once", nil, 1, nil, nil, 1},
		{"retried after write", nil, 3, nil, nil, 1},
		{"commit failed after write", nil, 1, errCommit, nil, 1},
		{"write failed", errWrite, 2, errWrite, errWrite, 1},
		{"write failed, run reports another error", errWrite, 1, errCommit, errWrite, 1},
		{"never reached write", nil, 0, errCommit, errCommit, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			runs := 0
			write := func(context.Context) error { runs++; return c.writeErr }
			err := WriteOnce(ctx, write, func(body func(int) error) error {
				for range c.attempts {
					_ = body(0)
				}
				return c.runErr
			})
			if !errors.Is(err, c.want) || (c.want == nil && err != nil) {
				t.Fatalf("error %v, want %v", err, c.want)
			}
			if runs != c.wantRuns {
				t.Fatalf("write ran %d times, want %d", runs, c.wantRuns)
			}
		})
	}
}
