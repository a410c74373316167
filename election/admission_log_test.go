package election

import (
	"log/slog"
	"testing"
	"time"
)

// TestRefusalsSummarised: two minutes of refusals of one reason, one a
// second (a node waiting to be added refuses the members' pre-votes) make
// two WARN lines, the first at once and one a minute later with the count
// so far, and the rest at Debug; another reason gets its own first line.
// The counters count every one.
func TestRefusalsSummarised(t *testing.T) {
	var rec recordLog
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := &admission{log: slog.New(slog.NewJSONHandler(&rec, &slog.HandlerOptions{Level: slog.LevelDebug})),
		now: func() time.Time { return clock }}
	for range 120 {
		a.refuse(&RefusedError{Reason: RefusedNotVoter, Command: "RequestPreVoteRequest", ID: "n1", Term: 7})
		clock = clock.Add(time.Second)
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
	if warns[RefusedNotVoter.String()] != 2 || warns[RefusedNotMember.String()] != 1 || debug != 118 {
		t.Errorf("WARN lines by reason %v, %d at Debug; want 2 not_voter, 1 not_member and 118 at Debug", warns, debug)
	}
	if n := a.stats().Refused[RefusedNotVoter]; n != 120 {
		t.Errorf("counted %d not_voter refusals, want 120", n)
	}
}
