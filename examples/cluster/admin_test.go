package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startOne starts a node that bootstraps a one-node cluster and waits until
// it leads. It returns the process, its API URL and its Raft address.
func startOne(t *testing.T, dir, id string, extra ...string) (*proc, string, string) {
	t.Helper()
	raft := freePorts(t, 1)[0]
	af := filepath.Join(dir, id+".addr")
	p := start(t, id, append([]string{"node", "-id", id, "-raft", raft, "-data", filepath.Join(dir, id),
		"-bootstrap", id + "=" + raft, "-heartbeat", "200ms", "-addr-file", af}, extra...)...)
	url := "http://" + field(addrFile(t, af, p), "http")
	waitLeads(t, url)
	return p, url, raft
}

// waitLeads waits until the node at url holds an epoch.
func waitLeads(t *testing.T, url string) nodeStatus {
	t.Helper()
	var st nodeStatus
	waitUntil(t, 20*time.Second, url+" leads", func() (bool, string) {
		if err := getJSON(client(nil), url+"/status", &st); err != nil {
			return false, err.Error()
		}
		return st.Epoch != "", fmt.Sprintf("%+v", st)
	})
	return st
}

// TestAdminRefusesCrossSite: every state-changing endpoint refuses what a
// web page on another site can make a browser send — a text/plain POST
// with its Origin — and also a JSON one from another Origin or marked
// cross-site by Sec-Fetch-Site, and text/plain without any Origin. The
// bodies are real requests (add a voter, resign, remove the only voter,
// isolate the node...): had any got through, the node's status would show
// it. A same-origin JSON request does get through.
func TestAdminRefusesCrossSite(t *testing.T) {
	dir := t.TempDir()
	_, url, _ := startOne(t, dir, "n1", "-fault-endpoint", "-store", "http://127.0.0.1:1")
	before := waitLeads(t, url)
	hc := client(nil)
	bodies := map[string]string{
		"/join":     `{"id":"evil","addr":"127.0.0.1:7999"}`,
		"/resign":   `{}`,
		"/transfer": `{"id":"evil"}`,
		"/remove":   `{"id":"n1"}`,
		"/replace":  `{"replaces":"n1","id":"evil","addr":"127.0.0.1:7999"}`,
		"/write":    `{"value":"from a web page"}`,
		"/fault":    `{"op":"isolate"}`,
	}
	evil := []struct {
		name   string
		header []string
		status int
	}{
		{"cross-site text/plain", []string{"Content-Type", "text/plain", "Origin", "http://evil.example"}, http.StatusForbidden},
		{"cross-site form", []string{"Content-Type", "application/x-www-form-urlencoded", "Origin", "http://evil.example"}, http.StatusForbidden},
		{"text/plain, no Origin", []string{"Content-Type", "text/plain"}, http.StatusUnsupportedMediaType},
		{"no content type", []string{"Content-Type", ""}, http.StatusUnsupportedMediaType},
		{"JSON from another origin", []string{"Origin", "http://evil.example"}, http.StatusForbidden},
		{"JSON from another port of this host", []string{"Origin", "http://127.0.0.1:1"}, http.StatusForbidden},
		{"JSON, Origin null", []string{"Origin", "null"}, http.StatusForbidden},
		{"JSON marked cross-site", []string{"Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
		{"JSON marked same-site", []string{"Sec-Fetch-Site", "same-site"}, http.StatusForbidden},
	}
	for path, body := range bodies {
		for _, e := range evil {
			status, reply, err := post(hc, url+path, body, e.header...)
			if err != nil {
				t.Fatal(err)
			}
			if status != e.status {
				t.Errorf("%s POST %s: %d %s; want %d", e.name, path, status, reply, e.status)
			}
		}
	}
	after := waitLeads(t, url)
	if after.Epoch != before.Epoch || !slices.Equal(after.Voters, []string{"n1"}) {
		t.Fatalf("refused requests changed the node: before %+v, after %+v", before, after)
	}
	// Same-origin JSON (the status page's own requests) gets through:
	// /transfer to an unknown node reaches the handler and answers 404.
	status, reply, err := post(hc, url+"/transfer", `{"id":"n7"}`, "Origin", url, "Sec-Fetch-Site", "same-origin")
	if err != nil || status != http.StatusNotFound {
		t.Errorf("same-origin /transfer: %d %s %v; want 404 from the handler", status, reply, err)
	}
	// /write never hands out the node's token (the store here is
	// unreachable, so the answer is 502 — with or without a token header).
	req, _ := http.NewRequest(http.MethodPost, url+"/write", strings.NewReader(`{"value":"x"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if tok := resp.Header.Get("Fencing-Token"); tok != "" {
		t.Errorf("POST /write answered with the node's token %q", tok)
	}
}

// TestAdminValidatesInput: bad joins are refused before the cluster is
// touched (an address that is not host:port, an ID or address that belongs
// to another member), /remove refuses an unknown ID (404) and the last
// voter (409); a member's rejoin at its own address changes nothing. Then a
// real node joins through a follower, which answers 503 naming the leader,
// and the joining node retries there, as the README says.
func TestAdminValidatesInput(t *testing.T) {
	dir := t.TempDir()
	_, url, raft := startOne(t, dir, "n1")
	hc := client(nil)
	for _, c := range []struct {
		body   string
		status int
		reply  string
	}{
		{`{"id":"n2","addr":"nonsense"}`, 400, "not host:port"},
		{`{"id":"n2","addr":"127.0.0.1:0"}`, 400, "port must be"},
		{`{"id":"n2","addr":"127.0.0.1:99999"}`, 400, "port must be"},
		{`{"id":"n2","addr":":7101"}`, 400, "no usable host"},
		{`{"id":"n2","addr":"http://127.0.0.1:7101"}`, 400, "not host:port"},
		{`{"id":"n2","addr":"127.0.0.1:7101","http":"bad"}`, 400, "http"},
		{`{"id":"","addr":"127.0.0.1:7101"}`, 400, "id"},
		{`{"id":"n 2","addr":"127.0.0.1:7101"}`, 400, "id"},
		{`{"id":"n1","addr":"127.0.0.1:7101"}`, 409, "already a member"},
		{`{"id":"n2","addr":"` + raft + `"}`, 409, "already belongs"},
		{`{"id":"n1","addr":"` + raft + `"}`, 200, `"already_member":true`},
	} {
		status, reply, err := post(hc, url+"/join", c.body)
		if err != nil {
			t.Fatal(err)
		}
		if status != c.status || !strings.Contains(reply, c.reply) {
			t.Errorf("join %s: %d %s; want %d containing %q", c.body, status, reply, c.status, c.reply)
		}
	}
	for _, c := range []struct {
		path, body string
		status     int
		reply      string
	}{
		{"/remove", `{"id":"n7"}`, 404, "n7"},
		{"/remove", `{"id":"n1"}`, 409, "last voter"},
		{"/transfer", `{"id":"n7"}`, 404, "n7"},
	} {
		status, reply, err := post(hc, url+c.path, c.body)
		if err != nil {
			t.Fatal(err)
		}
		if status != c.status || !strings.Contains(reply, c.reply) {
			t.Errorf("%s %s: %d %s; want %d containing %q", c.path, c.body, status, reply, c.status, c.reply)
		}
	}
	if st := waitLeads(t, url); !slices.Equal(st.Voters, []string{"n1"}) {
		t.Fatalf("after refused requests the voters are %v, want [n1]", st.Voters)
	}
	for _, probe := range []string{"/livez", "/readyz"} {
		if body, err := getText(hc, url+probe); err != nil || strings.TrimSpace(body) != "ok" {
			t.Errorf("GET %s on the leader: %q %v", probe, body, err)
		}
	}

	// n2 joins through n1 (the leader); n3 joins through n2, a follower.
	addrs := freePorts(t, 2)
	af2 := filepath.Join(dir, "n2.addr")
	p2 := start(t, "n2", "node", "-id", "n2", "-raft", addrs[0], "-data", filepath.Join(dir, "n2"),
		"-join", url, "-heartbeat", "200ms", "-addr-file", af2)
	url2 := "http://" + field(addrFile(t, af2, p2), "http")
	waitUntil(t, 20*time.Second, "n2 is a voter and follows n1", func() (bool, string) {
		var st nodeStatus
		err := getJSON(hc, url2+"/status", &st)
		return err == nil && st.Leader == "n1" && slices.Equal(st.Voters, []string{"n1", "n2"}), fmt.Sprintf("%+v %v", st, err)
	})
	status, reply, err := post(hc, url2+"/join", `{"id":"n9","addr":"127.0.0.1:7999"}`)
	var nl notLeaderBody
	_ = json.Unmarshal([]byte(reply), &nl)
	if err != nil || status != http.StatusServiceUnavailable || nl.Leader != "n1" || "http://"+nl.LeaderHTTP != url {
		t.Errorf("join via the follower n2: %d %s %v; want 503 naming n1 at %s", status, reply, err, url)
	}
	af3 := filepath.Join(dir, "n3.addr")
	p3 := start(t, "n3", "node", "-id", "n3", "-raft", addrs[1], "-data", filepath.Join(dir, "n3"),
		"-join", url2, "-heartbeat", "200ms", "-addr-file", af3)
	addrFile(t, af3, p3)
	waitUntil(t, 20*time.Second, "n3 joined through the follower n2", func() (bool, string) {
		var st nodeStatus
		err := getJSON(hc, url+"/status", &st)
		return err == nil && slices.Equal(st.Voters, []string{"n1", "n2", "n3"}), fmt.Sprintf("%+v %v", st, err)
	})
}

// TestNodeNeedsBootstrapOrJoin: a node with an empty (or missing) data
// directory and neither -bootstrap nor -join says so and exits 2 at once,
// instead of waiting for a cluster forever; restarted on its data
// directory, a node needs neither.
func TestNodeNeedsBootstrapOrJoin(t *testing.T) {
	dir := t.TempDir()
	raft := freePorts(t, 1)[0]
	for _, data := range []string{filepath.Join(dir, "missing"), t.TempDir()} {
		p := start(t, "fresh", "node", "-id", "n1", "-raft", raft, "-data", data)
		if code := p.wait(20 * time.Second); code != 2 {
			t.Errorf("a fresh node without -bootstrap or -join exited %d, want 2", code)
		}
		if out := p.log.String(); !strings.Contains(out, "neither -bootstrap nor -join") {
			t.Errorf("the fresh node does not say why it exits:\n%s", out)
		}
	}
	p, _, raft := startOne(t, dir, "n1")
	p.signal(syscall.SIGTERM)
	if code := p.wait(20 * time.Second); code != 0 {
		t.Fatalf("n1 exited %d after SIGTERM", code)
	}
	af := filepath.Join(dir, "again.addr")
	p = start(t, "n1-again", "node", "-id", "n1", "-raft", raft, "-data", filepath.Join(dir, "n1"), "-heartbeat", "200ms", "-addr-file", af)
	waitLeads(t, "http://"+field(addrFile(t, af, p), "http"))
}

// TestHelp: `cluster help` prints the usage of every command and exits 0.
func TestHelp(t *testing.T) {
	lines, code := runCluster(t, "help")
	out := strings.Join(lines, "\n")
	if code != 0 {
		t.Errorf("cluster help exited %d", code)
	}
	for _, want := range []string{"usage: cluster", "cluster node", "cluster store", "-scenario", "README.md"} {
		if !strings.Contains(out, want) {
			t.Errorf("cluster help lacks %q:\n%s", want, out)
		}
	}
}

// TestStoreCreatesDataDir: like a node's -data, the store's missing
// directory is created (both backends, and through the binary).
func TestStoreCreatesDataDir(t *testing.T) {
	dir := t.TempDir()
	for _, b := range []string{"sqlite", "bolt"} {
		data := filepath.Join(dir, b, "deeper", "store.db")
		af := filepath.Join(dir, b+".addr")
		p := start(t, "store-"+b, "store", "-http", "127.0.0.1:0", "-backend", b, "-data", data, "-addr-file", af)
		addrFile(t, af, p)
		if _, err := os.Stat(data); err != nil {
			t.Errorf("%s store did not create %s: %v", b, data, err)
		}
	}
}
