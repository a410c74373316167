package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// leaderURL returns the API URL of the node among urls that holds an
// epoch, waiting for one.
func leaderURL(t *testing.T, urls ...string) (string, nodeStatus) {
	t.Helper()
	var at string
	var st nodeStatus
	waitUntil(t, 30*time.Second, "a leader among "+strings.Join(urls, " "), func() (bool, string) {
		for _, u := range urls {
			if err := getJSON(client(nil), u+"/status", &st); err == nil && st.Epoch != "" {
				at = u
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", st)
	})
	return at, st
}

// stillElects makes the leader among urls resign and waits for a leader
// of a higher term: the cluster has not lost its quorum.
func stillElects(t *testing.T, urls ...string) nodeStatus {
	t.Helper()
	at, st := leaderURL(t, urls...)
	if status, reply, err := post(client(nil), at+"/resign", `{}`); err != nil || status != http.StatusOK {
		t.Fatalf("resign on %s: %d %s %v", at, status, reply, err)
	}
	var next nodeStatus
	waitUntil(t, 30*time.Second, fmt.Sprintf("a leader above term %d", st.Term), func() (bool, string) {
		_, next = leaderURL(t, urls...)
		return next.Term > st.Term, fmt.Sprintf("%+v", next)
	})
	return next
}

func sortedVoters(st nodeStatus) []string {
	v := slices.Clone(st.Voters)
	slices.Sort(v)
	return v
}

// TestReplaceDeadNode: three nodes, one killed for good. Replacing it with
// a node that is not running, and with a node that runs under a wrong
// -advertise, is refused (409 "refused", the dead voter stays, nothing
// wedges: the cluster still elects); the replacement started right, with
// -join and -replaces, takes the dead node's place in one step. On the
// code before learner-first joins the first attempt left four voters, two
// of them unreachable, and no leader for good.
func TestReplaceDeadNode(t *testing.T) {
	dir := t.TempDir()
	_, url1, _ := startOne(t, dir, "n1")
	// A refused replacement answers after the catch-up wait (5 heartbeats)
	// and the removal of its non-voter: longer than client's timeout.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	addrs := freePorts(t, 4) // n2, n3, n4, and one nothing listens on
	urls := []string{url1}
	var p3 *proc
	for i, id := range []string{"n2", "n3"} {
		af := filepath.Join(dir, id+".addr")
		p := start(t, id, "node", "-id", id, "-raft", addrs[i], "-data", filepath.Join(dir, id),
			"-join", url1, "-heartbeat", "200ms", "-addr-file", af)
		urls = append(urls, "http://"+field(addrFile(t, af, p), "http"))
		p3 = p
	}
	waitUntil(t, 30*time.Second, "voters n1 n2 n3", func() (bool, string) {
		_, st := leaderURL(t, urls...)
		return slices.Equal(sortedVoters(st), []string{"n1", "n2", "n3"}), fmt.Sprintf("%+v", st)
	})
	_ = p3.cmd.Process.Kill()
	<-p3.done
	live := urls[:2]

	// The new node is not running yet.
	body := fmt.Sprintf(`{"replaces":"n3","id":"n4","addr":%q}`, addrs[3])
	var reply changeBody
	waitUntil(t, 30*time.Second, "a refused replacement", func() (bool, string) {
		at, _ := leaderURL(t, live...)
		status, text, err := post(hc, at+"/replace", body)
		if err != nil || status == http.StatusServiceUnavailable {
			return false, fmt.Sprintf("%d %s %v", status, text, err) // leadership moved: ask again
		}
		if status != http.StatusConflict || json.Unmarshal([]byte(text), &reply) != nil || reply.State != "refused" ||
			!strings.Contains(reply.Error, "not caught up") {
			t.Fatalf("replace n3 with n4 not running: %d %s; want 409, refused, not caught up", status, text)
		}
		return true, ""
	})
	st := stillElects(t, live...)
	if v := sortedVoters(st); !slices.Equal(v, []string{"n1", "n2", "n3"}) {
		t.Fatalf("after the refused replacement the voters are %v", v)
	}

	// n4 runs, but advertises an address nothing listens on.
	af4 := filepath.Join(dir, "n4.addr")
	p4 := start(t, "n4", "node", "-id", "n4", "-raft", addrs[2], "-advertise", addrs[3], "-data", filepath.Join(dir, "n4"),
		"-join", url1, "-replaces", "n3", "-heartbeat", "200ms", "-addr-file", af4)
	addrFile(t, af4, p4)
	waitUntil(t, 30*time.Second, "n4's replacement refused", func() (bool, string) {
		return strings.Contains(p4.log.String(), "not caught up"), ""
	})
	st = stillElects(t, live...)
	if v := sortedVoters(st); !slices.Equal(v, []string{"n1", "n2", "n3"}) {
		t.Fatalf("with n4 at a wrong address the voters are %v", v)
	}
	p4.signal(syscall.SIGTERM)
	p4.wait(30 * time.Second)

	// Started right, n4 replaces n3 in one step.
	af4 = filepath.Join(dir, "n4-again.addr")
	p4 = start(t, "n4", "node", "-id", "n4", "-raft", addrs[2], "-data", filepath.Join(dir, "n4"),
		"-join", url1, "-replaces", "n3", "-heartbeat", "200ms", "-addr-file", af4)
	addrFile(t, af4, p4)
	waitUntil(t, 30*time.Second, "voters n1 n2 n4", func() (bool, string) {
		_, st := leaderURL(t, live...)
		return slices.Equal(sortedVoters(st), []string{"n1", "n2", "n4"}), fmt.Sprintf("%+v", st)
	})
	stillElects(t, live...)
}
