package election

import (
	"log/slog"
	"testing"
)

// TestRefusalsSummarised: a steady stream of refusals of one reason (a
// node waiting to be added refuses the members' pre-votes, about one a
// second; a forger's flood) makes one WARN line, with the count so far,
// and the rest at Debug; another reason gets its own first line. The
// counters count every one.
func TestRefusalsSummarised(t *testing.T) {
	var rec recordLog
	a := &admission{log: slog.New(slog.NewJSONHandler(&rec, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	for range 120 {
		a.refuse(&RefusedError{Reason: RefusedNotVoter, Command: "RequestPreVoteRequest", ID: "n1", Term: 7})
	}
	a.refuse(&RefusedError{Reason: RefusedNotMember, Command: "AppendEntriesRequest", ID: "x"})
	warns, debug := map[string]int{}, 0
	for _, r := range rec.records(t) {
		switch r["level"] {
		case "WARN":
			warns[r["reason"].(string)]++
		case "DEBUG":
			debug++
		}
	}
	if warns[RefusedNotVoter.String()] != 1 || warns[RefusedNotMember.String()] != 1 || debug != 119 {
		t.Errorf("WARN lines by reason %v, %d at Debug; want one WARN per reason and 119 at Debug", warns, debug)
	}
	if n := a.stats().Refused[RefusedNotVoter]; n != 120 {
		t.Errorf("counted %d not_voter refusals, want 120", n)
	}
}
