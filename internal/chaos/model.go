package chaos

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// register is the state of one fenced resource: the highest epoch the store
// accepted and the record written with it.
type register struct {
	HighTerm   uint64
	HighLeader string
	Written    bool
	Value      string
	ValueTerm  uint64
}

// hash is FNV-1a over the state's fields.
func (s register) hash() uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	mix := func(b byte) { h = (h ^ uint64(b)) * prime }
	for _, str := range [...]string{s.HighLeader, s.Value} {
		for i := 0; i < len(str); i++ {
			mix(str[i])
		}
		mix(0)
	}
	for _, n := range [...]uint64{s.HighTerm, s.ValueTerm} {
		for i := 0; i < 8; i++ {
			mix(byte(n >> (8 * i)))
		}
	}
	if s.Written {
		mix(1)
	}
	return h
}

// candidate is an epoch an indeterminate write may have carried.
type candidate struct {
	Term   uint64
	Leader string
}

// input is a porcupine operation's input: the operation and, for an
// indeterminate write, the epochs it may have been stamped with.
type input struct {
	Op
	Index      int // in History.Ops
	Candidates []candidate
	// Phase splits an acknowledged write in two operations over the same
	// interval: its admission (the fence raised to its epoch, or already
	// there) and, later or at once, its record written while the fence is
	// still at exactly that epoch. A fence may raise before the write runs
	// (Do commits a raise before the write; a proxy admits before it
	// forwards) but admits no newer epoch until the write returned, so the
	// record lands under its own epoch; a Tx backend does both at one
	// point, which the split allows too.
	Phase phase
	// Writes is how many acknowledged writes of the epoch share an
	// admission (Phase admit): the first of them raised the fence, the
	// others found it at their epoch.
	Writes int
}

// phase is the part of an acknowledged write an operation stands for.
type phase uint8

const (
	whole  phase = iota // the write as one step (refused, indeterminate)
	admit               // an acknowledged write's admission
	record              // an acknowledged write's record
)

// admits is the fence rule: a term above the highest, or the highest term
// from the same leader.
func (s register) admits(term uint64, leader string) bool {
	return term > s.HighTerm || (term == s.HighTerm && leader == s.HighLeader)
}

func (s register) apply(term uint64, leader, value string) register {
	return register{HighTerm: term, HighLeader: leader, Written: true, Value: value, ValueTerm: term}
}

// step is the fenced register's sequential specification. A write is applied
// iff its epoch is admitted; a refused write leaves the state alone and
// names the reason the rule gives (stale: an older term; conflict: the
// highest term under another leader); an
// indeterminate write either never took effect, or was applied with one of
// its candidate epochs (if admitted), or only raised the fence to one of
// them without its record (a fence admits before the record is written; a
// proxy or a handler can fail in between); a read returns the current
// record.
func step(state interface{}, in interface{}, _ interface{}) []interface{} {
	s := state.(register)
	op := in.(input)
	switch op.Kind {
	case Write:
		switch op.Outcome {
		case Acked:
			switch op.Phase {
			case admit:
				if !s.admits(op.Term, op.Leader) {
					return nil
				}
				r := s
				r.HighTerm, r.HighLeader = op.Term, op.Leader
				return []interface{}{r}
			case record:
				if s.HighTerm != op.Term || s.HighLeader != op.Leader {
					return nil // not under its own epoch: a newer one was admitted first
				}
				return []interface{}{s.apply(op.Term, op.Leader, op.Value)}
			}
			if s.admits(op.Term, op.Leader) {
				return []interface{}{s.apply(op.Term, op.Leader, op.Value)}
			}
			return nil
		case Refused:
			if s.admits(op.Term, op.Leader) {
				return nil
			}
			// The refusal must give the reason the rule gives: an off-by-one
			// in the stale rule would refuse the highest term as stale.
			switch op.Reason {
			case "stale":
				if op.Term >= s.HighTerm {
					return nil
				}
			case "conflict":
				if op.Term != s.HighTerm || op.Leader == s.HighLeader {
					return nil
				}
			}
			return []interface{}{s}
		case Indeterminate:
			next := []interface{}{s}
			for _, c := range op.Candidates {
				if s.admits(c.Term, c.Leader) {
					next = append(next, s.apply(c.Term, c.Leader, op.Value))
					if c.Term > s.HighTerm {
						// Admitted and raised, but the record never
						// written: a write the proxy cut off, a record
						// handler that failed after admission.
						r := s
						r.HighTerm, r.HighLeader = c.Term, c.Leader
						next = append(next, r)
					}
				}
			}
			return next
		}
	case Read:
		switch op.Outcome {
		case ReadValue:
			if s.Written && s.Value == op.Value && s.ValueTerm == op.Term {
				return []interface{}{s}
			}
			return nil
		case ReadMissing:
			if !s.Written {
				return []interface{}{s}
			}
			return nil
		}
	}
	return nil
}

// fencedRegister is the porcupine model: one fenced register per resource.
func fencedRegister() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byRes := map[string][]porcupine.Operation{}
			var order []string
			for _, o := range history {
				r := o.Input.(input).Resource
				if _, ok := byRes[r]; !ok {
					order = append(order, r)
				}
				byRes[r] = append(byRes[r], o)
			}
			out := make([][]porcupine.Operation, 0, len(order))
			for _, r := range order {
				out = append(out, byRes[r])
			}
			return out
		},
		Init: func() []interface{} { return []interface{}{register{}} },
		Step: step,
		Hash: func(state interface{}) uint64 { return state.(register).hash() },
		DescribeOperation: func(in, _ interface{}) string {
			op := in.(input)
			switch {
			case op.Kind == Read && op.Outcome == ReadMissing:
				return fmt.Sprintf("read(%s) -> none", op.Resource)
			case op.Kind == Read:
				return fmt.Sprintf("read(%s) -> %s @%d/%s", op.Resource, op.Value, op.Term, op.Leader)
			case op.Outcome == Indeterminate:
				return fmt.Sprintf("write(%s, %s) via %s -> ? (terms %v)", op.Resource, op.Value, op.Node, op.Candidates)
			case op.Phase == admit:
				return fmt.Sprintf("admit(%s) @%d/%s for %d writes from %s via %s", op.Resource, op.Term, op.Leader, op.Writes, op.Value, op.Node)
			default:
				return fmt.Sprintf("write(%s, %s) @%d/%s via %s -> %s", op.Resource, op.Value, op.Term, op.Leader, op.Node, op.Outcome)
			}
		},
		DescribeState: func(state interface{}) string {
			s := state.(register)
			if !s.Written {
				return fmt.Sprintf("highest=%d/%s empty", s.HighTerm, s.HighLeader)
			}
			return fmt.Sprintf("highest=%d/%s value=%s@%d", s.HighTerm, s.HighLeader, s.Value, s.ValueTerm)
		},
	}
	return nm.ToModel()
}
