package chaos

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/termfence/termfence/internal/liveness"
)

// Report is the verdict on a History.
type Report struct {
	Ops           int // operations that reached (or may have reached) the store
	Acked         int // writes the store acknowledged
	RefusedStale  int // writes refused with 409
	Indeterminate int // writes with unknown outcome
	// StaleAccepted counts writes the store accepted after it had accepted
	// a higher term (seen in the real-time order of the store's answers).
	StaleAccepted int
	// Lost counts acknowledged writes the store later forgot: a read went
	// back to an older record, or the post-run state is below them.
	Lost int
	// Linearizable is porcupine's verdict against the fenced register.
	Linearizable porcupine.CheckResult
	// LeaderConflicts lists terms claimed by more than one leader.
	LeaderConflicts []string
	// ContractBreaks lists answers that broke the error contract.
	ContractBreaks []string
	// Details explains each stale or lost write.
	Details []string
	// MaxTerm is the highest term any node claimed to lead or any write,
	// refusal or read named. Above SaneTerm it is a violation: terms moved
	// by a message, not by elections.
	MaxTerm uint64
	// HostileAccepted lists the hostile peer's forged RPCs a node accepted
	// (the runner fills it in; Check does not see them).
	HostileAccepted []string
	// Recovery is the liveness verdict: how long full service took to
	// come back after each fault, and which faults it did not come back
	// after within the bound (the runner fills it in; recovery.go).
	Recovery liveness.Report

	info  porcupine.LinearizationInfo
	model porcupine.Model
	ops   []porcupine.Operation // the history porcupine checked
}

// SaneTerm bounds the terms of a run: a chaos run elects at most a few
// hundred times, so a term above 2^20 was raised by a message, as the
// hostile peer's forged huge terms would (epoch.MaxTerm is 2^48).
const SaneTerm = 1 << 20

// OK reports whether the history satisfied every check.
func (r Report) OK() bool {
	return r.StaleAccepted == 0 && r.Lost == 0 && r.Linearizable == porcupine.Ok &&
		len(r.LeaderConflicts) == 0 && len(r.ContractBreaks) == 0 &&
		len(r.HostileAccepted) == 0 && r.MaxTerm <= SaneTerm && r.Recovery.OK()
}

// Passed reports whether the history passed every check that came to a
// verdict: OK, except that porcupine may have run out of time (Unknown).
// An Unknown verdict proves nothing either way; the chaos tests report it
// (with the saved history) and do not fail on it, so that a loaded machine
// never fails a run at random. The other checks (stale, lost,
// leader conflicts, contract) still judge the run.
func (r Report) Passed() bool {
	return r.StaleAccepted == 0 && r.Lost == 0 && r.Linearizable != porcupine.Illegal &&
		len(r.LeaderConflicts) == 0 && len(r.ContractBreaks) == 0 &&
		len(r.HostileAccepted) == 0 && r.MaxTerm <= SaneTerm && r.Recovery.OK()
}

// Unknown reports whether porcupine's check timed out.
func (r Report) Unknown() bool { return r.Linearizable == porcupine.Unknown }

// Violated reports whether the history shows the fence failing: a stale
// write accepted, an acknowledged write lost, or a history porcupine proved
// not linearizable. It is false for an Unknown (timed-out) verdict.
func (r Report) Violated() bool {
	return r.StaleAccepted > 0 || r.Lost > 0 || r.Linearizable == porcupine.Illegal
}

// Line is the one-line summary every run prints.
func (r Report) Line(seed int64, faults int) string {
	lin := "unknown"
	switch r.Linearizable {
	case porcupine.Ok:
		lin = "true"
	case porcupine.Illegal:
		lin = "false"
	}
	line := fmt.Sprintf("chaos: seed=%d faults=%d ops=%d acked=%d refused_stale=%d stale_accepted=%d lost=%d linearizable=%s",
		seed, faults, r.Ops, r.Acked, r.RefusedStale, r.StaleAccepted, r.Lost, lin)
	if rv := r.Recovery; len(rv.Recoveries) > 0 {
		line += fmt.Sprintf(" recovery_p50=%v recovery_max=%v recovery_late=%d",
			rv.P50().Round(time.Millisecond), rv.Max().Round(time.Millisecond), len(rv.Late()))
	}
	return line
}

// Visualize writes porcupine's HTML visualization of the checked history.
func (r Report) Visualize(path string) error {
	if r.model.Step == nil {
		return fmt.Errorf("chaos: nothing to visualize")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	if err := porcupine.VisualizePath(r.model, r.info, path); err != nil {
		return fmt.Errorf("chaos: visualize: %w", err)
	}
	return nil
}

// evidence is a moment by which the store provably held a term for a
// resource: the return of an answer that named it as accepted or highest.
type evidence struct {
	at   time.Duration
	term uint64
}

// Check runs every check on h. timeout bounds porcupine (0: none); a
// timed-out check reports Linearizable Unknown.
func Check(h History, timeout time.Duration) Report {
	var r Report
	writers := map[string]int{} // write value -> index in h.Ops
	// seen maps each epoch to when its leader was seen holding it; a
	// zero-width "always" span marks evidence without a time (a 409's
	// highest, a read's record).
	seen := map[candidate]span{}
	leadersOfTerm := map[uint64]map[string]bool{}
	r.MaxTerm = h.MaxTerm
	noteLeader := func(term uint64, leader string, from, to time.Duration, always bool) {
		r.MaxTerm = max(r.MaxTerm, term)
		if term == 0 || leader == "" {
			return
		}
		c := candidate{term, leader}
		sp, ok := seen[c]
		switch {
		case !ok:
			sp = span{from, to, always}
		default:
			sp.from, sp.to, sp.always = min(sp.from, from), max(sp.to, to), sp.always || always
		}
		seen[c] = sp
		if leadersOfTerm[term] == nil {
			leadersOfTerm[term] = map[string]bool{}
		}
		leadersOfTerm[term][leader] = true
	}
	// ev: when the store's fence provably held a term (accepted writes,
	// refusals naming the highest, reads); recEv: when its record did
	// (accepted writes, reads). A fence can be raised by a write whose
	// record never lands (a proxy cut it off), so only recEv judges reads.
	ev := map[string][]evidence{}
	recEv := map[string][]evidence{}
	readTerm := map[string]candidate{} // write value -> epoch a read saw it with

	for i, op := range h.Ops {
		if op.Contract != "" {
			r.ContractBreaks = append(r.ContractBreaks, fmt.Sprintf("%s %s via %q at %v: %s", op.Kind, op.Value, op.Node, op.Call, op.Contract))
		}
		switch op.Outcome {
		case Acked:
			writers[op.Value] = i
			r.Acked++
			noteLeader(op.Term, op.Leader, op.Call, op.Return, false)
			ev[op.Resource] = append(ev[op.Resource], evidence{op.Return, op.Term})
			recEv[op.Resource] = append(recEv[op.Resource], evidence{op.Return, op.Term})
		case Refused:
			writers[op.Value] = i
			r.RefusedStale++
			noteLeader(op.Term, op.Leader, op.Call, op.Return, false)
			noteLeader(op.HighestTerm, op.HighestLeader, 0, 0, true)
			if op.HighestTerm > 0 {
				ev[op.Resource] = append(ev[op.Resource], evidence{op.Return, op.HighestTerm})
			}
		case Indeterminate:
			writers[op.Value] = i
			r.Indeterminate++
		case ReadValue:
			noteLeader(op.Term, op.Leader, 0, 0, true)
			readTerm[op.Value] = candidate{op.Term, op.Leader}
			ev[op.Resource] = append(ev[op.Resource], evidence{op.Return, op.Term})
			recEv[op.Resource] = append(recEv[op.Resource], evidence{op.Return, op.Term})
		}
	}
	for _, c := range h.Claims {
		noteLeader(c.Term, c.Leader, c.At, max(c.Last, c.At), false)
		if c.Node != c.Leader {
			r.LeaderConflicts = append(r.LeaderConflicts, fmt.Sprintf("node %s held epoch %d/%s naming another leader", c.Node, c.Term, c.Leader))
		}
	}
	var terms []uint64
	for t, ls := range leadersOfTerm {
		if len(ls) > 1 {
			terms = append(terms, t)
		}
	}
	sort.Slice(terms, func(i, j int) bool { return terms[i] < terms[j] })
	for _, t := range terms {
		r.LeaderConflicts = append(r.LeaderConflicts, fmt.Sprintf("term %d claimed by %s", t, strings.Join(sortedKeys(leadersOfTerm[t]), ", ")))
	}

	for _, m := range []map[string][]evidence{ev, recEv} {
		for res := range m {
			e := m[res]
			sort.Slice(e, func(i, j int) bool { return e[i].at < e[j].at })
		}
	}
	// Each evidence list becomes its running maximum: best[i] is the
	// highest term of e[0..i] and the earliest moment it was seen, so
	// that highestIn is a binary search, not a scan of every earlier
	// answer for every operation (quadratic in a long run's history).
	type best struct {
		term uint64
		at   time.Duration
	}
	running := func(m map[string][]evidence) map[string][]best {
		out := map[string][]best{}
		for res, e := range m {
			b := make([]best, len(e))
			var cur best
			for i, x := range e {
				if x.term > cur.term {
					cur = best{x.term, x.at}
				}
				b[i] = cur
			}
			out[res] = b
		}
		return out
	}
	evBest, recEvBest := running(ev), running(recEv)
	// highestIn returns the highest term the evidence m (with its running
	// maximum b) shows the store held for res before t, and the earliest
	// moment it was known to hold it.
	highestIn := func(m map[string][]evidence, b map[string][]best, res string, t time.Duration) (uint64, time.Duration) {
		e := m[res]
		n := sort.Search(len(e), func(i int) bool { return e[i].at >= t })
		if n == 0 {
			return 0, 0
		}
		return b[res][n-1].term, b[res][n-1].at
	}

	stale := map[string]bool{}
	lost := map[string]bool{}
	for _, op := range h.Ops {
		switch op.Outcome {
		case Acked:
			if hb, at := highestIn(ev, evBest, op.Resource, op.Call); hb > op.Term && !stale[op.Value] {
				stale[op.Value] = true
				r.Details = append(r.Details, fmt.Sprintf("stale accepted: write %s term %d via %s called at %v, after the store held term %d at %v", op.Value, op.Term, op.Node, op.Call, hb, at))
			}
		case ReadValue:
			hb, at := highestIn(recEv, recEvBest, op.Resource, op.Call)
			if hb <= op.Term {
				continue
			}
			wi, ok := writers[op.Value]
			if !ok {
				continue // a value nobody wrote: porcupine refuses it
			}
			w := h.Ops[wi]
			if w.Outcome == Acked && w.Return < at {
				if !lost[op.Value] {
					lost[op.Value] = true
					r.Details = append(r.Details, fmt.Sprintf("lost: read at %v went back to %s term %d, acknowledged at %v, after the store held term %d at %v", op.Call, w.Value, op.Term, w.Return, hb, at))
				}
				continue
			}
			if !stale[op.Value] {
				stale[op.Value] = true
				r.Details = append(r.Details, fmt.Sprintf("stale accepted: read at %v returned %s term %d (write via %s called at %v, %s), after the store held term %d at %v", op.Call, w.Value, op.Term, w.Node, w.Call, w.Outcome, hb, at))
			}
		}
	}
	for _, res := range sortedKeys(h.Final) {
		f := h.Final[res]
		floor := f.Term
		if !f.Found {
			floor = 0
		}
		if f.Highest < floor {
			floor = f.Highest
		}
		for _, op := range h.Ops {
			if op.Resource == res && op.Outcome == Acked && op.Term > floor && !lost[op.Value] {
				lost[op.Value] = true
				r.Details = append(r.Details, fmt.Sprintf("lost: acknowledged write %s term %d on %s; after the run the store reads term %d (found %t), highest %d", op.Value, op.Term, res, f.Term, f.Found, f.Highest))
			}
		}
	}
	r.StaleAccepted = len(stale)
	r.Lost = len(lost)

	// Porcupine history. Indeterminate writes never return: they get a
	// return time after every other event.
	var end int64
	for _, op := range h.Ops {
		if int64(op.Return) > end {
			end = int64(op.Return)
		}
		if int64(op.Call) > end {
			end = int64(op.Call)
		}
	}
	if end < math.MaxInt64 {
		end++
	}
	// settled[res][epoch] is the earliest return of an acknowledged write
	// of that epoch on res: after it the fence held exactly that epoch or a
	// newer one, never an older one.
	settled := map[string]map[candidate]time.Duration{}
	for _, op := range h.Ops {
		if op.Outcome != Acked {
			continue
		}
		c := candidate{op.Term, op.Leader}
		if settled[op.Resource] == nil {
			settled[op.Resource] = map[candidate]time.Duration{}
		}
		if r, ok := settled[op.Resource][c]; !ok || op.Return < r {
			settled[op.Resource][c] = op.Return
		}
	}
	var ops []porcupine.Operation
	// admitAt[res][epoch] is the index in ops of the one admission of the
	// acknowledged writes of that epoch that may have raised the fence.
	admitAt := map[string]map[candidate]int{}
	for i, op := range h.Ops {
		in := input{Op: op, Index: i}
		ret := int64(op.Return)
		switch op.Outcome {
		case Acked, Refused, ReadValue, ReadMissing:
		case Indeterminate:
			if op.Pending {
				ret = end
			}
			if c, ok := readTerm[op.Value]; ok {
				in.Candidates = []candidate{c}
			} else {
				in.Candidates = candidatesFor(op, seen, h.Slack)
			}
		default:
			continue
		}
		// An acknowledged write called after another write of its epoch
		// was acknowledged on its resource finds the fence at its epoch
		// already (or newer, and then it fails as a whole write too): its
		// admission changes nothing and it is checked as one step. Only
		// the writes that may have raised the fence are split, which
		// spares porcupine the orderings of thousands of admissions that
		// change nothing (a saved netlab history took it minutes).
		//
		// The writes that are split were all called by the earliest return
		// r of an acknowledged write of their epoch, and returned at r or
		// later: their intervals all hold r, so their union is one interval.
		// They share one admission over that union (eleven
		// writes of a new epoch, each with its own admission, gave
		// porcupine 3^11 orderings of admissions that change nothing but
		// the set of operations linearized, and the check of a saved
		// netlab history minutes). That admission is as strict as k of
		// them: the raise happens at some point of the union, which lies
		// in some write's interval, where that write's own admission would
		// have raised the fence; every other write's admission finds the
		// fence at its epoch at its record (which requires it) and changes
		// nothing there. Conversely the first of k admissions is where the
		// shared one goes, and the others changed nothing.
		if r, ok := settled[op.Resource][candidate{op.Term, op.Leader}]; op.Outcome == Acked && !(ok && r < op.Call) {
			c := candidate{op.Term, op.Leader}
			if admitAt[op.Resource] == nil {
				admitAt[op.Resource] = map[candidate]int{}
			}
			if j, ok := admitAt[op.Resource][c]; ok {
				a := &ops[j]
				a.Call, a.Return = min(a.Call, int64(op.Call)), max(a.Return, ret)
				adm := a.Input.(input)
				adm.Writes++
				a.Input = adm
			} else {
				adm := in
				adm.Phase, adm.Writes = admit, 1
				admitAt[op.Resource][c] = len(ops)
				ops = append(ops, porcupine.Operation{ClientId: op.Client, Input: adm, Call: int64(op.Call), Output: op.Outcome, Return: ret})
			}
			in.Phase = record
		}
		ops = append(ops, porcupine.Operation{ClientId: op.Client, Input: in, Call: int64(op.Call), Output: op.Outcome, Return: ret})
		r.Ops++
	}
	r.model, r.ops = fencedRegister(), ops
	r.Linearizable, r.info = porcupine.CheckOperationsVerbose(r.model, ops, timeout)
	return r
}

// span is when an epoch's leader was seen holding it.
type span struct {
	from, to time.Duration
	always   bool // seen without a time: a candidate for any operation
}

// candidatesFor lists the epochs op's node was seen leading close enough to
// op (within slack; any time if slack is 0), oldest first: the epochs the
// node can have stamped it with.
func candidatesFor(op Op, seen map[candidate]span, slack time.Duration) []candidate {
	var out []candidate
	for c, sp := range seen {
		if c.Leader != op.Node {
			continue
		}
		if slack == 0 || sp.always || (sp.from <= op.Return+slack && sp.to >= op.Call-slack) {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Term < out[j].Term })
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
