package liveness

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestAwaitBackAtOnce: service already back when the fault ends is a
// recovery in time, found on the first call.
func TestAwaitBackAtOnce(t *testing.T) {
	calls := 0
	rec, err := Await(context.Background(), "fault 1 (resign)", time.Now(), time.Hour, time.Millisecond, func() string { calls++; return "" })
	if err != nil {
		t.Fatal(err)
	}
	if rec.Late || rec.Fault != "fault 1 (resign)" || rec.Missing != "" || calls != 1 {
		t.Fatalf("got %+v after %d calls, want in time after one call", rec, calls)
	}
}

// TestAwaitBackAfterPolls: Await keeps asking until Ready answers "", and
// Took counts from the fault's end, not from the call.
func TestAwaitBackAfterPolls(t *testing.T) {
	ended := time.Now().Add(-time.Minute) // the fault ended a minute ago
	calls := 0
	rec, err := Await(context.Background(), "fault 2 (partition)", ended, time.Hour, time.Millisecond, func() string {
		calls++
		if calls < 4 {
			return "no leader"
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Late || calls != 4 {
		t.Fatalf("got %+v after %d calls, want in time after 4", rec, calls)
	}
	if rec.Took < time.Minute {
		t.Fatalf("Took %v, want at least the minute since the fault ended", rec.Took)
	}
}

// TestAwaitLate: service that never comes back is late once the bound
// has passed, with what was missing.
func TestAwaitLate(t *testing.T) {
	ended := time.Now()
	bound := 30 * time.Millisecond
	rec, err := Await(context.Background(), "fault 3 (kill-node)", ended, bound, 5*time.Millisecond, func() string { return "no write accepted" })
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Late || rec.Missing != "no write accepted" || rec.Took < bound {
		t.Fatalf("got %+v, want late after at least %v, missing \"no write accepted\"", rec, bound)
	}
	if since := time.Since(ended); since < bound {
		t.Fatalf("returned after %v, before the bound %v", since, bound)
	}
}

// TestAwaitLateAlready: a fault that ended longer ago than the bound is
// judged on one call.
func TestAwaitLateAlready(t *testing.T) {
	calls := 0
	rec, err := Await(context.Background(), "f", time.Now().Add(-time.Hour), time.Second, time.Hour, func() string { calls++; return "x" })
	if err != nil || !rec.Late || calls != 1 {
		t.Fatalf("got %+v, %v after %d calls; want late after one call", rec, err, calls)
	}
}

// TestAwaitCancelled: a cancelled wait is no verdict.
func TestAwaitCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	_, err := Await(ctx, "f", time.Now(), time.Hour, time.Millisecond, func() string {
		calls++
		if calls == 3 {
			cancel()
		}
		return "not yet"
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// TestAwaitBadInput: a non-positive bound or interval, or no Ready, is
// refused before anything is called.
func TestAwaitBadInput(t *testing.T) {
	called := false
	ready := func() string { called = true; return "" }
	for _, c := range []struct {
		bound, every time.Duration
		ready        Ready
	}{{0, time.Millisecond, ready}, {time.Second, 0, ready}, {-time.Second, time.Millisecond, ready}, {time.Second, time.Millisecond, nil}} {
		if _, err := Await(context.Background(), "f", time.Now(), c.bound, c.every, c.ready); err == nil {
			t.Errorf("Await(bound %v, every %v, ready nil %t): no error", c.bound, c.every, c.ready == nil)
		}
	}
	if called {
		t.Error("Ready was called for bad input")
	}
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// TestReportFigures: quantiles by nearest rank over the recoveries in
// time, Max over all, and the verdict.
func TestReportFigures(t *testing.T) {
	for _, c := range []struct {
		name     string
		took     []time.Duration
		late     []bool
		p50, max time.Duration
		ok       bool
	}{
		{"none", nil, nil, 0, 0, true},
		{"one", []time.Duration{ms(7)}, []bool{false}, ms(7), ms(7), true},
		{"four", []time.Duration{ms(40), ms(10), ms(30), ms(20)}, []bool{false, false, false, false}, ms(20), ms(40), true},
		{"five", []time.Duration{ms(50), ms(10), ms(40), ms(20), ms(30)}, []bool{false, false, false, false, false}, ms(30), ms(50), true},
		{"late excluded from p50", []time.Duration{ms(10), ms(9000), ms(20)}, []bool{false, true, false}, ms(10), ms(9000), false},
		{"all late", []time.Duration{ms(9000)}, []bool{true}, 0, ms(9000), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := Report{Bound: ms(5000)}
			for i, d := range c.took {
				r.Add(Recovery{Fault: "f", Took: d, Late: c.late[i], Missing: "m"})
			}
			if got := r.P50(); got != c.p50 {
				t.Errorf("P50 = %v, want %v", got, c.p50)
			}
			if got := r.Max(); got != c.max {
				t.Errorf("Max = %v, want %v", got, c.max)
			}
			if got := r.OK(); got != c.ok {
				t.Errorf("OK = %t, want %t", got, c.ok)
			}
			if got := len(r.Errors()); got != len(r.Late()) {
				t.Errorf("%d errors for %d late recoveries", got, len(r.Late()))
			}
		})
	}
	r := Report{Bound: ms(100)}
	for i := 1; i <= 100; i++ {
		r.Add(Recovery{Took: ms(i)})
	}
	if q0, q99, q1 := r.Quantile(0), r.Quantile(0.99), r.Quantile(1); q0 != ms(1) || q99 != ms(99) || q1 != ms(100) {
		t.Errorf("Quantile(0, 0.99, 1) = %v, %v, %v; want 1ms, 99ms, 100ms", q0, q99, q1)
	}
}

// TestReportNamesLateFault: the line counts the late recoveries and the
// errors name each late fault and what it lacked.
func TestReportNamesLateFault(t *testing.T) {
	r := Report{Bound: 14 * time.Second}
	r.Add(Recovery{Fault: "fault 1 (resign)", Took: 412 * time.Millisecond})
	r.Add(Recovery{Fault: "fault 2 (partition: isolate n2)", Took: 14 * time.Second, Late: true, Missing: "no leader with a confirmed epoch"})
	if got, want := r.Line(), "recovery: faults=2 p50=412ms max=14s bound=14s late=1"; got != want {
		t.Errorf("Line() = %q, want %q", got, want)
	}
	errs := r.Errors()
	if len(errs) != 1 || !strings.Contains(errs[0], "fault 2 (partition: isolate n2)") || !strings.Contains(errs[0], "no leader with a confirmed epoch") {
		t.Errorf("Errors() = %q, want one naming fault 2 and what it lacked", errs)
	}
	if s := r.Recoveries[1].String(); !strings.Contains(s, "not back") {
		t.Errorf("String() = %q", s)
	}
}
