package chaos

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// Kind says what an operation did to the fenced store.
type Kind uint8

// Operation kinds.
const (
	// Write is a POST /write sent to a node, which stamps it with its epoch
	// and forwards it to the store.
	Write Kind = iota + 1
	// Read is a GET /read sent straight to the store.
	Read
)

func (k Kind) String() string {
	switch k {
	case Write:
		return "write"
	case Read:
		return "read"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Outcome is what the client learned about an operation.
type Outcome uint8

// Outcomes. Only Acked, Refused, Indeterminate, ReadValue and ReadMissing
// enter the linearizability check; the others provably left the store
// untouched (NotLeader, RefusedAuth, Unreachable) or observed nothing
// (ReadFailed).
const (
	// Acked: the store answered 200 through the node; the write is applied.
	Acked Outcome = iota + 1
	// Refused: the store answered 409 (stale or conflicting epoch).
	Refused
	// RefusedAuth: the store answered 401 or 403.
	RefusedAuth
	// NotLeader: the node answered 503 "not leader" without forwarding.
	NotLeader
	// Unreachable: the node refused the connection; nothing was sent.
	Unreachable
	// StoreDead: the node answered 5xx while no store process existed
	// for the whole operation, or answered that it could not connect to
	// the store; nothing was applied.
	StoreDead
	// Indeterminate: timeout, reset or a 5xx other than "not leader": the
	// write may or may not have been applied, at any later time.
	Indeterminate
	// ReadValue: the store returned the resource's record.
	ReadValue
	// ReadMissing: the store answered 404, never written.
	ReadMissing
	// ReadFailed: no answer; the read is dropped from the check.
	ReadFailed
)

var outcomeNames = map[Outcome]string{
	Acked: "acked", Refused: "refused", RefusedAuth: "refused-auth", NotLeader: "not-leader",
	Unreachable: "unreachable", StoreDead: "store-dead", Indeterminate: "indeterminate", ReadValue: "value",
	ReadMissing: "missing", ReadFailed: "failed",
}

func (o Outcome) String() string {
	if s, ok := outcomeNames[o]; ok {
		return s
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// Op is one client operation with its call and return times, measured on
// the monotonic clock from the start of the run.
type Op struct {
	Client   int
	Kind     Kind
	Resource string
	// Value is the value written (Write) or returned (ReadValue). Write
	// values are unique within a history.
	Value string
	// Node is the ID of the node a Write was sent to; its epoch stamped it.
	Node   string
	Call   time.Duration
	Return time.Duration // meaningless for Indeterminate
	Outcome
	// Term and Leader: the accepted epoch (Acked), the presented epoch
	// (Refused) or the epoch stored with the returned value (ReadValue).
	Term   uint64
	Leader string
	// HighestTerm and HighestLeader: the store's highest epoch named in a
	// 409 body (Refused).
	HighestTerm   uint64
	HighestLeader string
	// Reason is why a Refused write was refused, from the 409 body's code:
	// "stale" (an older term than the highest) or "conflict" (the highest
	// term, another leader). The model checks it.
	Reason string
	// Cut marks a write the store's proxy cut off at its timeout (504
	// backend_timeout) because the client was too slow: expected of a
	// trickling client, not a failure of the store.
	Cut bool
	// Pending marks an Indeterminate write that may still take effect
	// after Return: no answer came back (the node may still hold it). A
	// node's 5xx after its store request failed ends the write at Return.
	Pending bool
	// Status is the HTTP status, 0 if none.
	Status int
	// Detail says why the outcome is what it is (error text, body).
	Detail string
	// Contract is non-empty when the response broke the error contract
	// (a refusal without a JSON error body, a 200 without the accepted
	// epoch, a 5xx from a reachable store).
	Contract string
}

// Claim is one observation of a node that said it led: state Leader and a
// non-empty epoch in its GET /status.
type Claim struct {
	At     time.Duration // first seen
	Last   time.Duration // last seen
	Node   string        // the node that answered
	Term   uint64        // from its epoch
	Leader string        // from its epoch
}

// FinalState is what the store reports for one resource after the run.
type FinalState struct {
	Found   bool // GET /read answered 200 (not 404)
	Value   string
	Term    uint64
	Leader  string
	Highest uint64 // term of the store's GET /status "highest" entry
}

// History is everything a run observed.
type History struct {
	Ops    []Op
	Claims []Claim
	// Final maps each resource to the store's state after the run; a
	// resource missing here was not checked for lost writes.
	Final map[string]FinalState
	// Slack bounds how long before its call or after its return a node
	// can have stamped an indeterminate write: the longest pause plus a
	// margin. Zero means unbounded: any epoch its node ever held.
	Slack time.Duration
	// MaxTerm is the highest Raft term any node reported in its GET
	// /status, leader or not.
	MaxTerm uint64 `json:",omitempty"`
}

// Recorder collects a History from concurrent clients.
type Recorder struct {
	start  time.Time
	mu     sync.Mutex
	ops    []Op
	claims []Claim
	seen   map[Claim]int
	term   uint64 // highest term noted
}

// NewRecorder returns a recorder whose clock starts now.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Now is the recorder's monotonic clock.
func (r *Recorder) Now() time.Duration { return time.Since(r.start) }

// Add records a completed operation.
func (r *Recorder) Add(op Op) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

// NoteTerm records a Raft term a node reported.
func (r *Recorder) NoteTerm(t uint64) {
	r.mu.Lock()
	r.term = max(r.term, t)
	r.mu.Unlock()
}

// Claim records a leadership claim seen at c.At, merging repeated
// sightings of one (node, term, leader) into one claim with a last-seen time.
func (r *Recorder) Claim(c Claim) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[Claim]int{}
	}
	key := Claim{Node: c.Node, Term: c.Term, Leader: c.Leader}
	if i, ok := r.seen[key]; ok {
		if c.At > r.claims[i].Last {
			r.claims[i].Last = c.At
		}
		return
	}
	c.Last = c.At
	r.seen[key] = len(r.claims)
	r.claims = append(r.claims, c)
}

// History returns a copy of what was recorded, operations sorted by call
// time, with final as the post-run state.
func (r *Recorder) History(final map[string]FinalState, slack time.Duration) History {
	r.mu.Lock()
	defer r.mu.Unlock()
	ops := append([]Op(nil), r.ops...)
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	return History{Ops: ops, Claims: append([]Claim(nil), r.claims...), Final: final, Slack: slack, MaxTerm: r.term}
}
