package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

// A timeline records one scenario run twice over: as the lines it prints
// (Kleppmann's "t=…  who  what" log, with real milliseconds since the start)
// and as events and spans that -svg draws. Both come from the same calls, so
// the picture shows exactly what the log says happened.

// Kinds of timeline events.
const (
	evElected  = "elected"  // a node took an epoch (Term)
	evStepDown = "stepdown" // a node's Raft noticed it lost its term
	evAccepted = "accepted" // a write the resource accepted (Lane -> To)
	evRefused  = "refused"  // a write the resource refused (Lane -> To)
	evRead     = "read"     // a read (To -> Lane)
	evNote     = "note"     // anything else worth a mark
)

// Kinds of timeline spans.
const (
	spanEpoch = "epoch" // a node holds an epoch: the leader lease as the node sees it
	spanPause = "pause" // a node (or its writer) is frozen
)

// event is one instant of a run.
type event struct {
	At    time.Duration
	Lane  string // who acted
	To    string // the resource lane a write or read went to; "" for none
	Kind  string
	Term  uint64 // the epoch's term, when one is involved
	Label string // a short label for the picture
}

// span is an interval on one lane.
type span struct {
	From, To time.Duration
	Lane     string
	Kind     string
	Term     uint64
	Label    string
	open     bool
}

// timeline is safe for concurrent use.
type timeline struct {
	mu     sync.Mutex
	out    io.Writer
	start  time.Time
	title  string
	lanes  []string          // in order of first use, nodes first
	labels map[string]string // lane -> label shown in the picture ("A n1")
	res    map[string]bool   // lanes that are resources (stores, logs), not actors
	events []event
	spans  []*span
	end    time.Duration
}

func newTimeline(out io.Writer, title string) *timeline {
	return &timeline{out: out, start: time.Now(), title: title, labels: map[string]string{}, res: map[string]bool{}}
}

// now is the time since the run started.
func (t *timeline) now() time.Duration { return time.Since(t.start) }

// lane makes sure a lane exists (in order of first mention).
func (t *timeline) laneLocked(name string) {
	if name != "" && !slices.Contains(t.lanes, name) {
		t.lanes = append(t.lanes, name)
	}
}

// addLanes declares lanes up front, so that they appear in this order.
func (t *timeline) addLanes(names ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range names {
		t.laneLocked(n)
	}
}

// addResource declares a resource lane (drawn below the actors).
func (t *timeline) addResource(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.laneLocked(name)
	t.res[name] = true
}

// setLabel names a lane in the picture (e.g. "A n1" once n1 plays A).
func (t *timeline) setLabel(lane, label string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.laneLocked(lane)
	t.labels[lane] = label
}

// say prints one line in Kleppmann's style.
func (t *timeline) say(who, format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sayLocked(who, fmt.Sprintf(format, args...))
}

func (t *timeline) sayLocked(who, text string) {
	fmt.Fprintf(t.out, "  t=%5dms  %-7s %s\n", t.now().Milliseconds(), who, text)
}

// print writes a line as it is (headers, explanations).
func (t *timeline) print(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.out, format+"\n", args...)
}

// mark records an event at the current time.
func (t *timeline) mark(e event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e.At = t.now()
	t.laneLocked(e.Lane)
	t.laneLocked(e.To)
	t.events = append(t.events, e)
}

// begin opens a span on lane; the returned function closes it (once).
func (t *timeline) begin(lane, kind string, term uint64, label string) func() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.laneLocked(lane)
	s := &span{From: t.now(), Lane: lane, Kind: kind, Term: term, Label: label, open: true}
	t.spans = append(t.spans, s)
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if s.open {
			s.To, s.open = t.now(), false
		}
	}
}

// finish closes every open span at the current time and fixes the run's
// end; call it once the scenario is over.
func (t *timeline) finish() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.end = t.now()
	for _, s := range t.spans {
		if s.open {
			s.To, s.open = t.end, false
		}
	}
}

// snapshot returns copies of the recorded events and spans.
func (t *timeline) snapshot() (lanes []string, labels map[string]string, res map[string]bool, events []event, spans []span, end time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	res = make(map[string]bool, len(t.res))
	for k, v := range t.res {
		res[k] = v
	}
	for _, s := range t.spans {
		spans = append(spans, *s)
	}
	labels = make(map[string]string, len(t.labels))
	for k, v := range t.labels {
		labels[k] = v
	}
	end = t.end
	if end == 0 {
		end = t.now()
	}
	return slices.Clone(t.lanes), labels, res, slices.Clone(t.events), spans, end
}

// summary is a scenario's last line: "summary: scenario=NAME k=v ... ok=B".
// Every value is taken from what happened in the run.
type summary struct {
	name string
	kv   []string
	ok   bool
}

func newSummary(name string) *summary { return &summary{name: name} }

// add appends k=v.
func (s *summary) add(k string, v any) *summary {
	s.kv = append(s.kv, fmt.Sprintf("%s=%v", k, v))
	return s
}

func (s *summary) String() string {
	parts := append([]string{"summary: scenario=" + s.name}, s.kv...)
	return strings.Join(append(parts, fmt.Sprintf("ok=%v", s.ok)), " ")
}

// ms formats a duration in whole milliseconds: "547ms".
func ms(d interface{ Milliseconds() int64 }) string {
	return fmt.Sprintf("%dms", d.Milliseconds())
}

// list formats a record value for a summary, without spaces: "[v0,B]".
func list(v string) string { return "[" + strings.Join(strings.Fields(v), ",") + "]" }
