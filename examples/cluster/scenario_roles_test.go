package main

import (
	"strconv"
	"testing"
)

// TestScenarioRoles runs `cluster -scenario roles`: every role of the
// frozen owner moves, its late writes under the old grants are all refused,
// and no role's resource loses its new owner's write.
func TestScenarioRoles(t *testing.T) {
	m, out := runScenario(t, "-scenario", "roles")
	for k, want := range map[string]string{"roles": "12", "late_accepted": "0", "lost": "0", "ok": "true"} {
		if m[k] != want {
			t.Errorf("%s=%s, want %s; output:\n%s", k, m[k], want, out)
		}
	}
	moved, _ := strconv.Atoi(m["moved"])
	refused, _ := strconv.Atoi(m["refused"])
	if moved < 2 || refused < moved {
		t.Errorf("moved=%d refused=%d: want several roles moved and a refusal for each; output:\n%s", moved, refused, out)
	}
}
