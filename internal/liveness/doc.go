// Package liveness is the bound-after-heal oracle of the project's
// randomized harnesses: after each fault ends, full service must come back
// within a stated bound, and the run reports how long it took.
//
// A safety oracle passes a system that stopped serving for good: nothing
// wrong is ever committed by a cluster that commits nothing. This package
// judges the other half. A harness injects a fault, ends it (heals the
// partition, continues the paused process, restarts the killed one), and
// then calls Await with a Ready function that says what full service still
// lacks — "no leader with a confirmed epoch", "no write accepted since" —
// or "" once everything is back. Await polls it until it answers "" or the
// bound passes, and returns a Recovery: the fault's name, how long service
// took to come back, and, for a late one, what was still missing.
//
// A Report collects a run's recoveries under one bound. Report.OK is false
// if any recovery was late; Report.Errors names each late fault and what it
// lacked; Report.Line prints the figures beside a harness's safety summary:
//
//	recovery: faults=30 p50=412ms max=1.9s bound=14s late=0
//
// # API
//
//	type Ready func() (missing string)
//	type Recovery struct {
//		Fault   string        // names the fault, as the harness logs it
//		Took    time.Duration // from the fault's end until service was back (late: until the bound)
//		Late    bool          // service was not back within the bound
//		Missing string        // late: what Ready still reported at the bound
//	}
//	func Await(ctx context.Context, fault string, ended time.Time, bound, every time.Duration, ready Ready) (Recovery, error)
//	type Report struct {
//		Bound      time.Duration
//		Recoveries []Recovery
//	}
//	func (r *Report) Add(rec Recovery)
//	func (r Report) OK() bool
//	func (r Report) Late() []Recovery
//	func (r Report) Quantile(q float64) time.Duration // over the recoveries in time
//	func (r Report) P50() time.Duration
//	func (r Report) Max() time.Duration               // over all, late ones included
//	func (r Report) Line() string
//	func (r Report) Errors() []string
//
// # Choosing the bound
//
// The bound is the harness's to state and document, derived from the
// timeouts of the system under test (for a Raft group: failure detection,
// a few election rounds, the new leader's confirmation, the clients' own
// polling), then scaled for a loaded machine (internal/testwait). It only
// turns "never comes back" into a failure with a message, so it is
// generous: several times what a quiet machine needs. The recovery times
// are the figures to watch; the bound is the alarm.
//
// # Guarantees and non-guarantees
//
// Await returns as soon as Ready answers "", after at most bound plus one
// poll interval otherwise, and at once when ctx ends (with ctx's error and
// no verdict: a cancelled run proves nothing about liveness). Ready is
// called from Await's goroutine only. A Report is a plain value; Add is not
// safe for concurrent use. The oracle samples: a passing run shows that
// service came back after these faults, not that it always would.
package liveness
