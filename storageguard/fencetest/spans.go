package fencetest

import (
	"fmt"
	"os"
	"sort"
	"strings"
)

// Span is one accepted write: the term it ran under and the logical times
// (any increasing counter) at which it started and ended.
type Span struct {
	Term       uint64
	Start, End int64
}

// CheckSpans verifies docs/DESIGN.md I4 on one resource's accepted writes:
// ordered by start, terms never decrease, and every write under an older
// term ended before any write under a newer term started. It returns an
// error naming the first violation.
func CheckSpans(spans []Span) error {
	if len(spans) == 0 {
		return nil
	}
	byStart := append([]Span(nil), spans...)
	sort.Slice(byStart, func(i, j int) bool { return byStart[i].Start < byStart[j].Start })
	for i := 1; i < len(byStart); i++ {
		if byStart[i].Term < byStart[i-1].Term {
			return fmt.Errorf("term %d accepted (started at %d) after term %d (started at %d)",
				byStart[i].Term, byStart[i].Start, byStart[i-1].Term, byStart[i-1].Start)
		}
	}
	byTerm := append([]Span(nil), spans...)
	sort.Slice(byTerm, func(i, j int) bool { return byTerm[i].Term < byTerm[j].Term })
	// maxEnd over all strictly older terms must precede every start.
	var maxEnd int64 = -1
	var maxEndTerm uint64
	for i := 0; i < len(byTerm); {
		j := i
		for j < len(byTerm) && byTerm[j].Term == byTerm[i].Term {
			if byTerm[j].Start < maxEnd {
				return fmt.Errorf("write under term %d started at %d, before a write under older term %d ended at %d",
					byTerm[j].Term, byTerm[j].Start, maxEndTerm, maxEnd)
			}
			j++
		}
		for ; i < j; i++ {
			if byTerm[i].End > maxEnd {
				maxEnd, maxEndTerm = byTerm[i].End, byTerm[i].Term
			}
		}
	}
	return nil
}

// AppendSpan is a write to a span log, a file that stands for a resource
// several processes write under a fence: it appends "S term writer" to the
// file at path, calls during (nil: nothing), then appends "E term writer".
// Call it inside the fence's write; ReadSpans turns the file into spans
// whose clock is the line order. writer identifies the writing process (or
// goroutine) among those that share the file.
func AppendSpan(path string, term uint64, writer int, during func()) error {
	lf, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer lf.Close()
	if _, err := fmt.Fprintf(lf, "S %d %d\n", term, writer); err != nil {
		return err
	}
	if during != nil {
		during()
	}
	_, err = fmt.Fprintf(lf, "E %d %d\n", term, writer)
	return err
}

// ReadSpans reads a span log that AppendSpan wrote: the line index is the
// clock. A writer that starts twice, an end without its start or a write
// that never ended is an error.
func ReadSpans(path string) ([]Span, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	open := map[int]Span{}
	var spans []Span
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var kind string
		var term uint64
		var writer int
		if _, err := fmt.Sscanf(line, "%s %d %d", &kind, &term, &writer); err != nil {
			return nil, fmt.Errorf("line %d %q: %v", i, line, err)
		}
		switch kind {
		case "S":
			if _, dup := open[writer]; dup {
				return nil, fmt.Errorf("line %d: writer %d starts twice", i, writer)
			}
			open[writer] = Span{Term: term, Start: int64(i)}
		case "E":
			s, ok := open[writer]
			if !ok || s.Term != term {
				return nil, fmt.Errorf("line %d: end without start", i)
			}
			delete(open, writer)
			s.End = int64(i)
			spans = append(spans, s)
		default:
			return nil, fmt.Errorf("line %d %q: not a span line", i, line)
		}
	}
	if len(open) != 0 {
		return nil, fmt.Errorf("%d writes never ended", len(open))
	}
	return spans, nil
}

// maxTerm returns the highest term among spans (0 if none).
func maxTerm(spans []Span) uint64 {
	var top uint64
	for _, s := range spans {
		top = max(top, s.Term)
	}
	return top
}
