package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/termfence/termfence/internal/netlab"
	"github.com/termfence/termfence/internal/netlab/netlabtest"
)

// leaderURL returns the API URL of the node among urls that holds an
// epoch, waiting for one.
func leaderURL(t *testing.T, urls ...string) (string, nodeStatus) {
	t.Helper()
	return leaderURLVia(t, client(nil), urls...)
}

// leaderURLVia is leaderURL through hc.
func leaderURLVia(t *testing.T, hc *http.Client, urls ...string) (string, nodeStatus) {
	t.Helper()
	var at string
	var st nodeStatus
	waitUntil(t, 30*time.Second, "a leader among "+strings.Join(urls, " "), func() (bool, string) {
		for _, u := range urls {
			if err := getJSON(hc, u+"/status", &st); err == nil && st.Epoch != "" {
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
	return stillElectsVia(t, client(nil), urls...)
}

// stillElectsVia is stillElects through hc.
func stillElectsVia(t *testing.T, hc *http.Client, urls ...string) nodeStatus {
	t.Helper()
	at, st := leaderURLVia(t, hc, urls...)
	if status, reply, err := post(hc, at+"/resign", `{}`); err != nil || status != http.StatusOK {
		t.Fatalf("resign on %s: %d %s %v", at, status, reply, err)
	}
	var next nodeStatus
	waitUntil(t, 30*time.Second, fmt.Sprintf("a leader above term %d", st.Term), func() (bool, string) {
		_, next = leaderURLVia(t, hc, urls...)
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
	waitUntil(t, 60*time.Second, "n4's replacement refused", func() (bool, string) {
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

// startOn runs the example binary with args on host h, as start does on
// this machine.
func startOn(t *testing.T, h *netlab.Host, name string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, cmd: h.Command(context.Background(), bin, args...), log: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s on %s: %v", name, h, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("--- output of %s:\n%s", name, p.log.String())
		}
	})
	return p
}

// TestReplaceDeadNodeLab runs DEPLOY.md's "Replace a dead node" runbook
// with its command lines, each node a process on a host of its own
// (netlab): three voters bootstrapped together, n3's machine lost for
// good; n4 started with -replaces n3 but advertising an address where
// nothing listens is refused and the cluster keeps electing; started
// right, it takes n3's place.
func TestReplaceDeadNodeLab(t *testing.T) {
	netlabtest.Require(t)
	lab := netlabtest.New(t, "n1", "n2", "n3", "n4", "op")
	op := lab.Host("op")
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: op.DialContext, DisableKeepAlives: true}}
	dir := t.TempDir()
	raftOf := func(id string) string { return lab.Host(id).HostPort(7101) }
	urlOf := func(id string) string { return "http://" + lab.Host(id).HostPort(8101) }
	boot := "n1=" + raftOf("n1") + ",n2=" + raftOf("n2") + ",n3=" + raftOf("n3")
	node := func(id string, extra ...string) []string {
		return append([]string{"node", "-id", id, "-cluster", "lab", "-raft", raftOf(id), "-http", lab.Host(id).HostPort(8101),
			"-data", filepath.Join(dir, id), "-heartbeat", "200ms"}, extra...)
	}
	var p3 *proc
	for _, id := range []string{"n1", "n2", "n3"} {
		p3 = startOn(t, lab.Host(id), id, node(id, "-bootstrap", boot)...)
	}
	live := []string{urlOf("n1"), urlOf("n2")}
	all := append(slices.Clone(live), urlOf("n3"))
	waitUntil(t, 60*time.Second, "voters n1 n2 n3", func() (bool, string) {
		_, st := leaderURLVia(t, hc, all...)
		return slices.Equal(sortedVoters(st), []string{"n1", "n2", "n3"}), fmt.Sprintf("%+v", st)
	})
	_ = p3.cmd.Process.Kill() // the machine is gone
	<-p3.done

	// A wrong -advertise: the operator host's address, where nothing listens.
	p4 := startOn(t, lab.Host("n4"), "n4", node("n4", "-advertise", op.HostPort(7101), "-join", urlOf("n1"), "-replaces", "n3")...)
	waitUntil(t, 60*time.Second, "n4's replacement refused", func() (bool, string) {
		return strings.Contains(p4.log.String(), "not caught up"), ""
	})
	st := stillElectsVia(t, hc, live...)
	if v := sortedVoters(st); !slices.Equal(v, []string{"n1", "n2", "n3"}) {
		t.Fatalf("with n4 at a wrong address the voters are %v", v)
	}
	_ = p4.cmd.Process.Signal(syscall.SIGTERM)
	<-p4.done

	// The runbook's command line.
	startOn(t, lab.Host("n4"), "n4", node("n4", "-join", urlOf("n1"), "-replaces", "n3")...)
	waitUntil(t, 60*time.Second, "voters n1 n2 n4", func() (bool, string) {
		_, st := leaderURLVia(t, hc, live...)
		return slices.Equal(sortedVoters(st), []string{"n1", "n2", "n4"}), fmt.Sprintf("%+v", st)
	})
	stillElectsVia(t, hc, append(live, urlOf("n4"))...)
}
