package main

import (
	"log/slog"
	"sync"
	"time"
)

// outageLog folds a run of failures of one kind (the store not answering)
// into a few lines, as raft's own peer warnings are folded: a WARN at the
// first failure, one WARN summary per every while the failures go on (with
// their count), and an INFO with the outage's length and count at the
// first success after it. The failures between go to Debug. A leader
// writing every second to a store that is down logs two lines a minute,
// not sixty.
type outageLog struct {
	every time.Duration
	now   func() time.Time

	mu        sync.Mutex
	active    bool
	since     time.Time
	lastLine  time.Time
	failures  int
	sinceLine int
}

func newOutageLog(every time.Duration) *outageLog {
	return &outageLog{every: every, now: time.Now}
}

// failed records one failure and logs it on log: at Warn when it starts an
// outage or a summary is due, at Debug otherwise.
func (o *outageLog) failed(log *slog.Logger, msg string, args ...any) {
	if o == nil { // a node built without one: every failure at Warn
		log.Warn(msg, args...)
		return
	}
	now := o.now()
	o.mu.Lock()
	first := !o.active
	if first {
		o.active, o.since, o.lastLine, o.failures, o.sinceLine = true, now, now, 0, 0
	}
	o.failures++
	o.sinceLine++
	summary := !first && now.Sub(o.lastLine) >= o.every
	failures, sinceLine, since := o.failures, o.sinceLine, o.since
	if summary {
		o.lastLine, o.sinceLine = now, 0
	}
	o.mu.Unlock()
	switch {
	case first:
		log.Warn(msg+"; repeats are logged at Debug, summarised every "+o.every.String(), args...)
	case summary:
		log.Warn(msg+" (still)", append(args, "for", now.Sub(since).Round(time.Second).String(),
			"failures", failures, "failures-since-last-line", sinceLine)...)
	default:
		log.Debug(msg, args...)
	}
}

// ok records a success; after an outage it logs, at Info on log, that the
// outage ended, with its length and count.
func (o *outageLog) ok(log *slog.Logger, msg string) {
	if o == nil {
		return
	}
	now := o.now()
	o.mu.Lock()
	active, since, failures := o.active, o.since, o.failures
	o.active = false
	o.mu.Unlock()
	if active {
		log.Info(msg, "after", now.Sub(since).Round(time.Millisecond).String(), "failures", failures)
	}
}
