package main

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// TestNodeBadRequests starts a node that has not joined any cluster (no
// -bootstrap, a -join target that does not answer) and checks the clear
// errors of its API: a join while no leader is known, a write on a node
// without an epoch, malformed JSON, a wrong method, and /fault without
// -fault-endpoint.
func TestNodeBadRequests(t *testing.T) {
	dir := t.TempDir()
	raft := freePorts(t, 2)
	af := filepath.Join(dir, "n1.addr")
	p := start(t, "lonely", "node", "-id", "n1", "-raft", raft[0], "-data", filepath.Join(dir, "n1"),
		"-join", "http://"+raft[1], "-heartbeat", "100ms", "-addr-file", af)
	url := "http://" + field(addrFile(t, af, p), "http")
	hc := client(nil)

	var st nodeStatus
	if err := getJSON(hc, url+"/status", &st); err != nil {
		t.Fatal(err)
	}
	if st.ID != "n1" || st.Epoch != "" || st.Leader != "" {
		t.Fatalf("status %+v; want n1 without epoch or leader", st)
	}
	for _, c := range []struct {
		method, path, body string
		status             int
		reply              string
	}{
		{"POST", "/join", `{"id":"n2","addr":"127.0.0.1:1"}`, 503, `"error":"not leader","leader":"","leader_http":""`},
		{"POST", "/join", `{"id":"n2","addr":"127.0.0.1:1"}`, 503, `no leader is known`},
		{"POST", "/join", `{"id":"n2"`, 400, `malformed JSON`},
		{"POST", "/join", `{"id":"n2"}`, 400, `addr`},
		{"POST", "/join", ``, 400, `empty`},
		{"POST", "/write", `{"value":"x"}`, 503, `"error":"not leader"`},
		// The epoch is taken before the body is read: a node without one
		// answers "not leader" whatever the body holds.
		{"POST", "/write", `[1,2]`, 503, `"error":"not leader"`},
		{"POST", "/transfer", `{"id":"n7"}`, 503, `not leader`},
		{"POST", "/resign", `{}`, 200, `"was_leader":false`},
		{"GET", "/join", ``, 405, `use POST`},
		{"POST", "/fault", `{"op":"isolate"}`, 404, ``},
	} {
		req, err := http.NewRequest(c.method, url+c.path, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(string(b), c.reply) {
			t.Errorf("%s %s %s: %d %s; want %d containing %q", c.method, c.path, c.body, resp.StatusCode, b, c.status, c.reply)
		}
	}
}
