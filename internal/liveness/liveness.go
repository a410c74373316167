package liveness

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Ready reports what full service still lacks after a fault ended: "" once
// everything the harness calls service is back.
type Ready func() (missing string)

// Recovery is one fault's liveness record.
type Recovery struct {
	// Fault names the fault, as the harness logs it ("fault 7 (partition:
	// isolate n2)").
	Fault string
	// Took is the time from the fault's end until Ready first answered ""
	// or, for a late recovery, until the bound passed.
	Took time.Duration
	// Late: service was not back within the bound.
	Late bool
	// Missing is, for a late recovery, what Ready still reported at the
	// bound.
	Missing string
}

// String is one line: "fault 7 (partition): back after 412ms" or "fault 7
// (partition): not back 14s after it ended: no leader with a confirmed epoch".
func (r Recovery) String() string {
	if r.Late {
		return fmt.Sprintf("%s: not back %v after it ended: %s", r.Fault, r.Took.Round(time.Millisecond), r.Missing)
	}
	return fmt.Sprintf("%s: back after %v", r.Fault, r.Took.Round(time.Millisecond))
}

// Await waits for service to come back after the fault named fault, which
// ended at ended: it calls ready at once and then every every, until ready
// answers "" (Took is then the time from ended to that call) or bound has
// passed since ended (the Recovery is Late, with ready's last answer). If
// ctx ends first it returns ctx's error and no verdict. bound and every
// must be positive.
func Await(ctx context.Context, fault string, ended time.Time, bound, every time.Duration, ready Ready) (Recovery, error) {
	if bound <= 0 || every <= 0 {
		return Recovery{}, fmt.Errorf("liveness: bound %v and poll interval %v must be positive", bound, every)
	}
	if ready == nil {
		return Recovery{}, errors.New("liveness: nil Ready")
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	deadline := time.NewTimer(time.Until(ended.Add(bound)))
	defer deadline.Stop()
	for {
		if err := ctx.Err(); err != nil {
			return Recovery{}, err
		}
		missing := ready()
		now := time.Now()
		if missing == "" {
			return Recovery{Fault: fault, Took: now.Sub(ended)}, nil
		}
		if now.Sub(ended) >= bound {
			return Recovery{Fault: fault, Took: now.Sub(ended), Late: true, Missing: missing}, nil
		}
		select {
		case <-ctx.Done():
			return Recovery{}, ctx.Err()
		case <-tick.C:
		case <-deadline.C:
		}
	}
}

// Report is a run's recoveries under one bound.
type Report struct {
	Bound      time.Duration
	Recoveries []Recovery
}

// Add records rec. It is not safe for concurrent use.
func (r *Report) Add(rec Recovery) { r.Recoveries = append(r.Recoveries, rec) }

// OK reports whether every recovery came within the bound (true for none).
func (r Report) OK() bool { return len(r.Late()) == 0 }

// Late returns the recoveries that did not come within the bound.
func (r Report) Late() []Recovery {
	var out []Recovery
	for _, x := range r.Recoveries {
		if x.Late {
			out = append(out, x)
		}
	}
	return out
}

// Quantile returns the q-quantile (0 <= q <= 1, nearest rank) of the times
// of the recoveries that came within the bound; 0 if none did.
func (r Report) Quantile(q float64) time.Duration {
	var ds []time.Duration
	for _, x := range r.Recoveries {
		if !x.Late {
			ds = append(ds, x.Took)
		}
	}
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	q = min(max(q, 0), 1)
	i := int(math.Ceil(q * float64(len(ds)))) // nearest rank
	return ds[min(max(i-1, 0), len(ds)-1)]
}

// P50 is the median recovery time of the recoveries in time.
func (r Report) P50() time.Duration { return r.Quantile(0.5) }

// Max is the longest Took of all recoveries, late ones included.
func (r Report) Max() time.Duration {
	var m time.Duration
	for _, x := range r.Recoveries {
		m = max(m, x.Took)
	}
	return m
}

// Line is the one-line summary:
//
//	recovery: faults=30 p50=412ms max=1.9s bound=14s late=0
func (r Report) Line() string {
	return fmt.Sprintf("recovery: faults=%d p50=%v max=%v bound=%v late=%d",
		len(r.Recoveries), r.P50().Round(time.Millisecond), r.Max().Round(time.Millisecond), r.Bound.Round(time.Millisecond), len(r.Late()))
}

// Errors returns one message per late recovery, naming the fault and what
// was missing at the bound.
func (r Report) Errors() []string {
	var out []string
	for _, x := range r.Late() {
		out = append(out, fmt.Sprintf("liveness: service not back within the bound %v after %s ended: %s", r.Bound.Round(time.Millisecond), x.Fault, x.Missing))
	}
	return out
}
