package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// handoverReply is the answer of POST /resign and POST /transfer.
type handoverReply struct {
	OK         bool   `json:"ok"`
	WasLeader  *bool  `json:"was_leader"`
	Leader     string `json:"leader"`
	LeaderHTTP string `json:"leader_http"`
}

// TestHandoverNamesTheNextLeader: POST /resign on the leader and POST
// /transfer to a named voter answer with the leader that took over (its ID
// and HTTP address), not with the nobody this node knows in the instant
// after it stepped down, and the node logs the handover naming it, as it
// does on SIGTERM.
func TestHandoverNamesTheNextLeader(t *testing.T) {
	c := startCluster(t, testHeartbeat, 0, nil, nil)
	waitUntil(t, 20*time.Second, "every member's HTTP address is recorded", func() (bool, string) {
		var view struct {
			Members []struct{ ID, HTTP string }
		}
		id, _ := c.leader(0, "")
		if err := getJSON(c.hc, c.nodeURL[id]+"/cluster", &view); err != nil {
			return false, err.Error()
		}
		for _, m := range view.Members {
			if m.HTTP == "" {
				return false, fmt.Sprintf("%+v", view)
			}
		}
		return len(view.Members) == len(c.nodes), fmt.Sprintf("%+v", view)
	})

	// handover asks the current leader to hand over (path, body from the
	// leader's ID), retrying (bounded) when leadership moved on its own
	// before the request arrived; it returns the old leader and the answer.
	handover := func(path string, body func(leader string) string) (string, handoverReply) {
		t.Helper()
		for attempt := 0; ; attempt++ {
			old, _ := c.leader(0, "")
			status, reply, err := post(c.hc, c.nodeURL[old]+path, body(old))
			if err != nil {
				t.Fatal(err)
			}
			var r handoverReply
			jerr := json.Unmarshal([]byte(reply), &r)
			if status == http.StatusOK && jerr == nil && (r.WasLeader == nil || *r.WasLeader) {
				return old, r
			}
			if attempt == 9 || (status != http.StatusOK && status != http.StatusServiceUnavailable) {
				t.Fatalf("POST %s to the leader %s: %d %s %v", path, old, status, reply, jerr)
			}
		}
	}
	check := func(path, old string, r handoverReply, want string) {
		t.Helper()
		if r.Leader == "" || r.Leader == old || (want != "" && r.Leader != want) {
			t.Errorf("POST %s on %s answered leader %q, want the next leader (%q)", path, old, r.Leader, want)
		} else if "http://"+r.LeaderHTTP != c.nodeURL[r.Leader] {
			t.Errorf("POST %s on %s answered leader_http %q for %s, whose API is %s", path, old, r.LeaderHTTP, r.Leader, c.nodeURL[r.Leader])
		}
		how := strings.TrimPrefix(path, "/")
		line := fmt.Sprintf(`msg="%s: handed leadership over" node=%s leader=%s`, how, old, r.Leader)
		waitUntil(t, 20*time.Second, old+" logs "+line, func() (bool, string) {
			return strings.Contains(c.nodes[old].log.String(), line), c.nodes[old].log.String()
		})
	}

	old, r := handover("/resign", func(string) string { return `{}` })
	check("/resign", old, r, "")

	var target string
	old, r = handover("/transfer", func(leader string) string {
		for id := range c.nodes {
			if id != leader {
				target = id
				break
			}
		}
		return `{"id":"` + target + `"}`
	})
	check("/transfer", old, r, target)
}
