package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/termfence/termfence/epoch"
)

// reply is the union of the JSON bodies a write can come back with: the
// store's 200 {"ok","term","leader"}, its refusal {"code","error",
// "presented","highest"}, and a node's 503 {"error","leader","leader_http"}.
type reply struct {
	OK         bool   `json:"ok"`
	Term       uint64 `json:"term"`
	Leader     string `json:"leader"`
	LeaderHTTP string `json:"leader_http"`
	Error      string `json:"error"`
	Code       string `json:"code"`
	Presented  string `json:"presented"`
	Highest    string `json:"highest"`
}

// classify fills op's outcome from a write's answer: err if no answer
// arrived, else its status and body. It returns the leader hint of a
// not-leader answer.
func classify(op *Op, status int, body []byte, err error) (hint string) {
	op.Status = status
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) && oe.Op == "dial" {
			op.Outcome, op.Detail = Unreachable, err.Error()
			return ""
		}
		op.Outcome, op.Detail, op.Pending = Indeterminate, err.Error(), true
		return ""
	}
	op.Detail = strings.TrimSpace(string(body))
	var r reply
	jsonErr := json.Unmarshal(body, &r)
	switch {
	case status == http.StatusOK:
		if jsonErr != nil || !r.OK || r.Term == 0 || r.Leader == "" {
			// Applied, but we cannot tell with which epoch.
			op.Outcome, op.Contract = Indeterminate, fmt.Sprintf("200 without the accepted epoch: %s", op.Detail)
			return ""
		}
		op.Outcome, op.Term, op.Leader = Acked, r.Term, r.Leader
	case status == http.StatusConflict:
		pres, perr := epoch.Parse(r.Presented)
		high, _ := epoch.Parse(r.Highest)
		if jsonErr != nil || r.Error == "" || perr != nil {
			// Refused, but the body does not say with which epoch: it
			// cannot be placed in the history, and breaks the contract.
			op.Outcome, op.Contract = RefusedAuth, fmt.Sprintf("409 without a JSON error naming the presented epoch: %s", op.Detail)
			return ""
		}
		op.Outcome, op.Term, op.Leader = Refused, pres.Term, pres.Leader
		op.HighestTerm, op.HighestLeader = high.Term, high.Leader
		switch r.Code {
		case "stale_epoch":
			op.Reason = "stale"
		case "conflicting_epoch":
			op.Reason = "conflict"
		default:
			op.Contract = fmt.Sprintf("409 with code %q, want stale_epoch or conflicting_epoch: %s", r.Code, op.Detail)
		}
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		op.Outcome = RefusedAuth
		if jsonErr != nil || r.Error == "" {
			op.Contract = fmt.Sprintf("%d without a JSON error body: %s", status, op.Detail)
		}
	case status == http.StatusServiceUnavailable && strings.Contains(r.Error, "not leader"):
		op.Outcome = NotLeader
		return r.Leader
	case status == http.StatusBadGateway && strings.Contains(r.Error, "dial tcp"):
		// The node could not connect to the store — refused, or in
		// netlab mode also EACCES, EHOSTUNREACH or a connect timeout
		// behind a cut link: nothing was sent.
		op.Outcome = StoreDead
	default:
		// A 5xx may be the node failing to reach the store, or the
		// store failing: the write may have been applied. Whether a 5xx
		// broke the contract is decided later, against the store's
		// downtime.
		op.Outcome = Indeterminate
		// The node has answered, so its store request is over, unless
		// it gave up waiting on a store that may still apply it.
		op.Pending = status == http.StatusBadGateway && (strings.Contains(r.Error, "deadline") || strings.Contains(r.Error, "timeout")) ||
			status == http.StatusGatewayTimeout
		if status < 500 {
			op.Contract = fmt.Sprintf("unexpected status %d: %s", status, op.Detail)
		}
	}
	return ""
}

// workload runs the clients, readers and the status poller.
type workload struct {
	c   *cluster
	rec *Recorder
	cfg Config

	mu       sync.Mutex
	hint     int    // index of the node believed to lead, -1 if none
	hintTerm uint64 // the term of that belief

	seq      atomic.Int64
	inflight sync.WaitGroup // writes still waiting for an answer

	roles *roleState // Config.Roles > 0: who holds which role (roles.go)
	prog  progress   // what the liveness oracle reads (recovery.go)
}

func newWorkload(c *cluster, rec *Recorder, cfg Config) *workload {
	w := &workload{c: c, rec: rec, cfg: cfg, hint: -1}
	if cfg.Roles > 0 {
		w.roles = &roleState{owner: map[string]int{}, grant: map[string]uint64{}, acked: map[string]uint64{}, claims: map[string]*Recorder{}} // roles.go
	}
	return w
}

// leader returns the node index believed to lead, or -1.
func (w *workload) leader() (int, uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.hint, w.hintTerm
}

// believe updates the leader hint with a claim of term by node i.
func (w *workload) believe(i int, term uint64) {
	w.mu.Lock()
	if term >= w.hintTerm {
		w.hint, w.hintTerm = i, term
	}
	w.mu.Unlock()
}

// poll asks node i for its status every PollEvery and records its
// leadership claims, until ctx ends.
func (w *workload) poll(ctx context.Context, i int) {
	tick := time.NewTicker(w.cfg.PollEvery)
	defer tick.Stop()
	for {
		st, err := w.c.status(ctx, i, w.cfg.PollEvery*5)
		at := w.rec.Now()
		if err == nil {
			w.rec.NoteTerm(st.Term)
			if ep, ok := st.leaderEpoch(); ok {
				w.rec.Claim(Claim{At: at, Node: w.c.nodes[i].id, Term: ep.Term, Leader: ep.Leader})
				w.believe(i, ep.Term)
				w.prog.noteClaim(at)
			}
			w.noteRoles(i, at, st) // roles.go
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (w *workload) nextValue(client int) string {
	return fmt.Sprintf("c%d-%d", client, w.seq.Add(1))
}

// writer writes through whichever node leads until ctx ends. A write is
// never abandoned: if the leader hint moves away from the node a write
// waits on (that node is paused or cut off, say), the writer leaves that
// write to finish in the background (its outcome is recorded when it
// comes, up to WriteTimeout) and goes on writing through the new leader.
// So writes are in flight at a paused leader while its successor accepts
// new ones, and most of them end with a definite answer.
func (w *workload) writer(ctx context.Context, client int, rng *rand.Rand) {
	target := -1
	tick := time.NewTicker(w.cfg.PollEvery)
	defer tick.Stop()
	for ctx.Err() == nil {
		if target < 0 {
			if h, _ := w.leader(); h >= 0 {
				target = h
			} else {
				target = rng.Intn(len(w.c.nodes))
			}
		}
		op := Op{Client: client, Kind: Write, Resource: w.cfg.resource(rng.Intn(w.cfg.Resources)), Node: w.c.nodes[target].id}
		op.Value = w.nextValue(client)
		done := make(chan Outcome, 1)
		hint := make(chan string, 1)
		w.inflight.Add(1)
		go func(op Op, target int) {
			defer w.inflight.Done()
			h, out := w.write(op, target)
			hint <- h
			done <- out
		}(op, target)
		var out Outcome
		detached := false
	wait:
		for {
			select {
			case out = <-done:
				break wait
			case <-tick.C:
				if h, _ := w.leader(); h >= 0 && h != target {
					target, detached = h, true
					break wait
				}
			}
		}
		if detached {
			continue
		}
		switch out {
		case Acked, Refused:
			// Stay with this node while it answers for the store.
		case NotLeader:
			if i := w.c.indexOf(<-hint); i >= 0 && i != target {
				target = i
			} else {
				target = w.other(target, rng)
				sleepCtx(ctx, w.cfg.PollEvery) // an election is under way
			}
		case StoreDead:
			sleepCtx(ctx, w.cfg.PollEvery) // the store is down; the node is fine
		default:
			target = w.other(target, rng)
			sleepCtx(ctx, w.cfg.PollEvery)
		}
		if w.cfg.Think > 0 {
			sleepCtx(ctx, time.Duration(rng.Int63n(int64(w.cfg.Think))))
		}
	}
}

// write sends op to node i, records it and returns its outcome and the
// not-leader hint. It is not cancelled with the run: the run waits for it.
func (w *workload) write(op Op, i int) (string, Outcome) {
	op.Call = w.rec.Now()
	st, body, err := w.c.do(context.Background(), http.MethodPost, "http://"+w.c.nodes[i].proc.addr+"/write",
		map[string]string{"resource": op.Resource, "value": op.Value}, w.cfg.WriteTimeout)
	op.Return = w.rec.Now()
	hint := classify(&op, st, body, err)
	if op.Outcome == Acked {
		w.prog.noteAck(op.Call)
	}
	w.rec.Add(op)
	return hint, op.Outcome
}

// other picks the hinted leader if it is not cur, else a random other node.
func (w *workload) other(cur int, rng *rand.Rand) int {
	if h, _ := w.leader(); h >= 0 && h != cur {
		return h
	}
	if len(w.c.nodes) == 1 {
		return 0
	}
	j := rng.Intn(len(w.c.nodes) - 1)
	if j >= cur {
		j++
	}
	return j
}

// readerLoop reads resource from the store every ReadEvery until ctx ends.
func (w *workload) readerLoop(ctx context.Context, client int, resource string) {
	tick := time.NewTicker(w.cfg.ReadEvery)
	defer tick.Stop()
	for {
		op := w.read(ctx, client, resource)
		if op.Outcome != ReadFailed {
			w.rec.Add(op)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// read performs one GET /read on the store.
func (w *workload) read(ctx context.Context, client int, resource string) Op {
	op := Op{Client: client, Kind: Read, Resource: resource}
	op.Call = w.rec.Now()
	st, body, err := w.c.do(ctx, http.MethodGet, w.c.storeURL+"/read?resource="+resource, nil, w.cfg.WriteTimeout)
	op.Return = w.rec.Now()
	op.Status = st
	switch {
	case err != nil:
		op.Outcome, op.Detail = ReadFailed, err.Error()
	case st == http.StatusOK:
		var r struct {
			Value  string `json:"value"`
			Term   uint64 `json:"term"`
			Leader string `json:"leader"`
		}
		if jerr := json.Unmarshal(body, &r); jerr != nil {
			op.Outcome, op.Contract = ReadFailed, fmt.Sprintf("read: malformed body %q", body)
			break
		}
		op.Outcome, op.Value, op.Term, op.Leader = ReadValue, r.Value, r.Term, r.Leader
	case st == http.StatusNotFound:
		op.Outcome = ReadMissing
	default:
		op.Outcome, op.Detail = ReadFailed, fmt.Sprintf("%d %s", st, body)
	}
	return op
}

// pinned is a write held open inside a node's handler: its headers are
// sent with "Expect: 100-continue", and the node's "100 Continue" proves
// the handler is running and reading the body. The nemesis pauses the node
// at that moment, and sends the body just before it resumes it.
type pinned struct {
	op   Op
	conn net.Conn
	br   *bufio.Reader
	body []byte
	done bool // a final answer arrived instead of 100 Continue
}

// openPinned starts a pinned write to node i. It returns nil if the node
// cannot be reached at all.
func (w *workload) openPinned(ctx context.Context, client, i int, resource string) *pinned {
	return w.openPinnedAt(ctx, client, i, resource, "/write")
}

// openPinnedAt is openPinned through the node's path (/write, or
// /role-write?role=NAME: roles.go).
func (w *workload) openPinnedAt(ctx context.Context, client, i int, resource, path string) *pinned {
	n := w.c.nodes[i]
	p := &pinned{op: Op{Client: client, Kind: Write, Resource: resource, Node: n.id}}
	p.op.Value = w.nextValue(client)
	p.body, _ = json.Marshal(map[string]string{"resource": resource, "value": p.op.Value})
	p.op.Call = w.rec.Now()
	dctx, cancel := context.WithTimeout(ctx, w.cfg.WriteTimeout)
	conn, err := w.c.dial(dctx, "tcp", n.proc.addr)
	cancel()
	if err != nil {
		return nil
	}
	p.conn, p.br = conn, bufio.NewReader(conn)
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n",
		path, n.proc.addr, len(p.body))
	_ = conn.SetDeadline(time.Now().Add(w.cfg.WriteTimeout))
	if _, err := io.WriteString(conn, head); err != nil {
		p.fail(w, err)
		return p
	}
	line, err := p.br.ReadString('\n')
	if err != nil {
		p.fail(w, err)
		return p
	}
	if strings.Contains(line, " 100 ") {
		// Skip the interim response's (empty) header block.
		for {
			l, err := p.br.ReadString('\n')
			if err != nil {
				p.fail(w, err)
				return p
			}
			if strings.TrimSpace(l) == "" {
				break
			}
		}
		return p
	}
	// A final answer before the body (not leader, say).
	p.br = bufio.NewReader(io.MultiReader(strings.NewReader(line), p.br))
	p.finish(w, false)
	return p
}

func (p *pinned) fail(w *workload, err error) {
	p.op.Return = w.rec.Now()
	classify(&p.op, 0, nil, err)
	p.conn.Close()
	p.done = true
	w.rec.Add(p.op)
}

// sendBody sends the held body; the node may be stopped, the kernel keeps it.
func (p *pinned) sendBody() {
	if p.done {
		return
	}
	if _, err := p.conn.Write(p.body); err != nil {
		p.op.Detail = err.Error()
	}
}

// finish reads the final answer (within timeout) and records the write.
func (p *pinned) finish(w *workload, extend bool) {
	if p.done {
		return
	}
	if extend {
		_ = p.conn.SetDeadline(time.Now().Add(w.cfg.WriteTimeout))
	}
	resp, err := http.ReadResponse(p.br, nil)
	var st int
	var body []byte
	if err == nil {
		st = resp.StatusCode
		body, err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
	}
	p.op.Return = w.rec.Now()
	classify(&p.op, st, body, err)
	p.op.Detail = "pinned: " + p.op.Detail
	p.conn.Close()
	p.done = true
	w.rec.Add(p.op)
}

// sleepCtx sleeps for d or until ctx ends. It paces load and holds faults;
// it never stands in for waiting on a condition.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
