package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/termfence/termfence/epoch"
)

// testCluster is three `node` processes and a `store`, on loopback.
type testCluster struct {
	t         *testing.T
	hc        *http.Client
	store     *proc
	storeURL  string
	nodes     map[string]*proc
	nodeURL   map[string]string // id -> http://addr
	heartbeat time.Duration
}

// startCluster starts a store and three nodes that bootstrap one cluster,
// all sharing an HMAC key; each node writes to the store every writeEvery
// while it leads.
func startCluster(t *testing.T, heartbeat, writeEvery time.Duration, storeFlags, nodeFlags []string) *testCluster {
	t.Helper()
	dir := t.TempDir()
	key := filepath.Join(dir, "token.key")
	if err := os.WriteFile(key, newKey(), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &testCluster{t: t, hc: client(nil), nodes: map[string]*proc{}, nodeURL: map[string]string{}, heartbeat: heartbeat}
	storeAddr := filepath.Join(dir, "store.addr")
	args := []string{"store", "-http", "127.0.0.1:0", "-data", filepath.Join(dir, "store.db"),
		"-token-key", key, "-addr-file", storeAddr}
	c.store = start(t, "store", append(args, storeFlags...)...)
	c.storeURL = "http://" + addrFile(t, storeAddr, c.store)

	raft := freePorts(t, 3)
	ids := []string{"n1", "n2", "n3"}
	var boot []string
	for i, id := range ids {
		boot = append(boot, id+"="+raft[i])
	}
	for i, id := range ids {
		af := filepath.Join(dir, id+".addr")
		args := []string{"node", "-id", id, "-raft", raft[i], "-data", filepath.Join(dir, id),
			"-bootstrap", strings.Join(boot, ","), "-store", c.storeURL, "-token-key", key,
			"-heartbeat", heartbeat.String(), "-write-every", writeEvery.String(), "-addr-file", af}
		c.nodes[id] = start(t, id, append(args, nodeFlags...)...)
	}
	for _, id := range ids {
		c.nodeURL[id] = "http://" + field(addrFile(t, filepath.Join(dir, id+".addr"), c.nodes[id]), "http")
	}
	return c
}

func (c *testCluster) status(id string) (nodeStatus, error) {
	var st nodeStatus
	err := getJSON(c.hc, c.nodeURL[id]+"/status", &st)
	return st, err
}

// leader waits until one of the nodes (other than except) holds an epoch
// with a term above minTerm, and returns it.
func (c *testCluster) leader(minTerm uint64, except string) (string, epoch.Epoch) {
	c.t.Helper()
	var id string
	var ep epoch.Epoch
	waitUntil(c.t, 20*time.Second, fmt.Sprintf("a node other than %q holds an epoch above term %d", except, minTerm), func() (bool, string) {
		var seen []string
		for n := range c.nodes {
			if n == except {
				continue
			}
			st, err := c.status(n)
			if err != nil {
				seen = append(seen, err.Error())
				continue
			}
			seen = append(seen, fmt.Sprintf("%s:%s/%d/%q", n, st.State, st.Term, st.Epoch))
			if st.Epoch == "" {
				continue
			}
			e, err := epoch.Parse(st.Epoch)
			if err == nil && e.Term > minTerm && e.Leader == n {
				id, ep = n, e
				return true, ""
			}
		}
		return false, strings.Join(seen, " ")
	})
	return id, ep
}

// record reads the store's register.
func (c *testCluster) record() (readReply, error) {
	var r readReply
	err := getJSON(c.hc, c.storeURL+"/read?resource="+DefaultResource, &r)
	return r, err
}

func (c *testCluster) storeStatus() (storeStatus, error) {
	var st storeStatus
	err := getJSON(c.hc, c.storeURL+"/status", &st)
	return st, err
}

// waitRecordBy waits until the store's register was last written under ep.
func (c *testCluster) waitRecordBy(ep epoch.Epoch) {
	c.t.Helper()
	waitUntil(c.t, 20*time.Second, "the store holds a write under "+ep.String(), func() (bool, string) {
		r, err := c.record()
		if err != nil {
			return false, err.Error()
		}
		return r.Leader == ep.Leader && r.Term == ep.Term, fmt.Sprintf("%+v", r)
	})
}

// checkWriteForwarding checks POST /write on the nodes: the leader stamps
// the write with its token and relays the store's acceptance; a follower
// answers 503 naming the leader and its HTTP address. Under load an
// election can move leadership during a round (a follower then names no
// leader, or another): a round is tried again, up to 10, and the check
// fails only if none comes out right.
func (c *testCluster) checkWriteForwarding() {
	c.t.Helper()
	var problems []string
	for attempt := 0; attempt < 10; attempt++ {
		if problems = c.writeForwardingRound(); len(problems) == 0 {
			return
		}
	}
	c.t.Errorf("POST /write in 10 rounds, the last:\n%s", strings.Join(problems, "\n"))
}

// writeForwardingRound is one round of checkWriteForwarding; it returns
// what was wrong.
func (c *testCluster) writeForwardingRound() (problems []string) {
	c.t.Helper()
	id, ep := c.leader(0, "")
	waitUntil(c.t, 20*time.Second, "every node knows the leader's HTTP address", func() (bool, string) {
		for n := range c.nodes {
			st, err := c.status(n)
			if err != nil || "http://"+st.LeaderHTTP != c.nodeURL[id] {
				return false, fmt.Sprintf("%s: %+v %v", n, st, err)
			}
		}
		return true, ""
	})
	for n, u := range c.nodeURL {
		status, reply, err := post(c.hc, u+"/write", `{"value":"by-request"}`)
		if err != nil {
			c.t.Fatal(err)
		}
		if n == id {
			// The leader may have lost its epoch in the meantime; then it
			// answers 503 or the store refuses it (409).
			if status != http.StatusOK && status != http.StatusServiceUnavailable && status != http.StatusConflict {
				problems = append(problems, fmt.Sprintf("write via the leader %s: %d %s", n, status, reply))
			}
			// Under load it may also have lost and won again: then it
			// stamps the write with its newer term, its own.
			var w writeReply
			if status == http.StatusOK && (json.Unmarshal([]byte(reply), &w) != nil || w.Leader != n || w.Term < ep.Term) {
				problems = append(problems, fmt.Sprintf("write via the leader %s: %s; want it stamped with its own epoch, term %d or later", n, reply, ep.Term))
			}
			status, reply, err = post(c.hc, u+"/write", `[1,2]`)
			if err != nil {
				c.t.Fatal(err)
			}
			if status != http.StatusServiceUnavailable && (status != http.StatusBadRequest || !strings.Contains(reply, "malformed JSON")) {
				problems = append(problems, fmt.Sprintf("malformed write via the leader %s: %d %s; want 400 naming the malformed JSON", n, status, reply))
			}
			continue
		}
		want := fmt.Sprintf(`"leader":"%s","leader_http":"%s"`, id, strings.TrimPrefix(c.nodeURL[id], "http://"))
		if status != http.StatusServiceUnavailable || !strings.Contains(reply, want) {
			problems = append(problems, fmt.Sprintf("write via the follower %s: %d %s; want 503 with %s", n, status, reply, want))
		}
	}
	return problems
}

// testHeartbeat is the nodes' -heartbeat in these tests (lease: half).
const testHeartbeat = 300 * time.Millisecond

// pauseLeader freezes the leader with SIGSTOP while its writer is between
// writes, waits until another node is elected and has written, then
// resumes it with SIGCONT. It returns the old leader, its epoch, the
// successor's epoch, and how many writes the store had accepted under the
// old epoch just before the resume.
//
// The node it stops must still hold the epoch it was found with: under
// load leadership can move between reading the leader and the SIGSTOP, and
// then the frozen node is not the epoch holder. So right before the signal
// it asks the node again, and starts over (up to 10 times) when its epoch
// changed.
func (c *testCluster) pauseLeader() (old string, oldEp, nextEp epoch.Epoch, acceptedOld uint64) {
	c.t.Helper()
	for attempt := 1; ; attempt++ {
		old, oldEp = c.leader(0, "")
		c.waitRecordBy(oldEp)
		st, err := c.status(old)
		if err == nil && st.Epoch == oldEp.String() {
			break
		}
		if attempt == 10 {
			c.t.Fatalf("the leader changed between finding it and stopping it, 10 times: %s held %s, now %+v %v", old, oldEp, st, err)
		}
	}

	c.nodes[old].signal(syscall.SIGSTOP)
	stopped := time.Now()
	_, nextEp = c.leader(oldEp.Term, old)
	c.waitRecordBy(nextEp)
	if lease := c.heartbeat / 2; time.Since(stopped) <= lease {
		c.t.Fatalf("the pause (%v) is not longer than the lease (%v): the scenario did not happen", time.Since(stopped), lease)
	}
	st, err := c.storeStatus()
	if err != nil {
		c.t.Fatal(err)
	}
	c.nodes[old].signal(syscall.SIGCONT)
	return old, oldEp, nextEp, st.AcceptedBy[oldEp.String()]
}

// TestPausedLeaderIsFenced is the seed's scenario with real processes: the
// leader is frozen with SIGSTOP for longer than its lease while its writer
// is between writes; another node is elected and writes; the old leader is
// resumed with SIGCONT and, still holding its old token, writes — and the
// store refuses it and keeps the successor's data.
func TestPausedLeaderIsFenced(t *testing.T) {
	c := startCluster(t, testHeartbeat, 50*time.Millisecond, nil, nil)
	c.checkWriteForwarding()
	old, oldEp, nextEp, _ := c.pauseLeader()

	// The old leader's writer wakes up holding its old token and writes;
	// the store must refuse exactly that epoch.
	waitUntil(t, 20*time.Second, "the store refused the old leader's epoch "+oldEp.String(), func() (bool, string) {
		st, err := c.storeStatus()
		if err != nil {
			return false, err.Error()
		}
		return st.RefusedBy[oldEp.String()] >= 1, fmt.Sprintf("%+v", st)
	})
	// The successor's data survives: the register was never overwritten
	// under the old epoch, and the fence stays at or above the successor's.
	r, err := c.record()
	if err != nil {
		t.Fatal(err)
	}
	if r.Term < nextEp.Term || r.Leader == old && r.Term <= oldEp.Term {
		t.Fatalf("register %+v: written under the old epoch %s after %s wrote", r, oldEp, nextEp)
	}
	st, err := c.storeStatus()
	if err != nil {
		t.Fatal(err)
	}
	h, err := epoch.Parse(st.Highest[DefaultResource])
	if err != nil || h.Term < nextEp.Term {
		t.Fatalf("store's highest %q is below the successor's %s (%v)", st.Highest[DefaultResource], nextEp, err)
	}
	// The old leader learns it was deposed: a follower with no epoch, and
	// its metrics count the refusal.
	waitUntil(t, 20*time.Second, old+" reports it follows", func() (bool, string) {
		s, err := c.status(old)
		if err != nil {
			return false, err.Error()
		}
		return s.State == "Follower" && s.Epoch == "" && s.Term >= nextEp.Term, fmt.Sprintf("%+v", s)
	})
	metrics, err := getText(c.hc, c.nodeURL[old]+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(metrics, `termfence_example_store_writes_total{result="refused"} `) ||
		strings.Contains(metrics, `termfence_example_store_writes_total{result="refused"} 0`) ||
		!strings.Contains(metrics, `termfence_election_epoch_transitions_total{transition="withdrawn"} `) {
		t.Errorf("%s's metrics do not count the refused write:\n%s", old, metrics)
	}

	// SIGTERM on the current leader hands leadership over before it exits.
	cur, curEp := c.leader(0, "")
	c.nodes[cur].signal(syscall.SIGTERM)
	if code := c.nodes[cur].wait(20 * time.Second); code != 0 {
		t.Fatalf("%s exited with %d after SIGTERM, want 0", cur, code)
	}
	if !strings.Contains(c.nodes[cur].log.String(), "handed leadership over") {
		t.Errorf("%s did not hand leadership over on SIGTERM", cur)
	}
	if id, ep := c.leader(curEp.Term, cur); ep.Term <= curEp.Term {
		t.Fatalf("after %s's SIGTERM, %s leads in term %d, not above %d", cur, id, ep.Term, curEp.Term)
	}
	for id, p := range c.nodes {
		if id == cur {
			continue
		}
		p.signal(syscall.SIGTERM)
		if code := p.wait(20 * time.Second); code != 0 {
			t.Errorf("%s exited with %d after SIGTERM, want 0", id, code)
		}
	}
	c.store.signal(syscall.SIGTERM)
	if code := c.store.wait(10 * time.Second); code != 0 {
		t.Errorf("store exited with %d after SIGTERM, want 0", code)
	}

	// Every log line README.md quotes (msg="...") is one these processes
	// really wrote during this run.
	var logs strings.Builder
	for _, p := range c.nodes {
		logs.WriteString(p.log.String())
	}
	logs.WriteString(c.store.log.String())
	for _, msg := range readmeLogMessages(t, false) {
		if !strings.Contains(logs.String(), msg) {
			t.Errorf("README.md quotes the log line %s, which no process wrote in this run", msg)
		}
	}
}

// TestPausedLeaderUnfencedControl is the control experiment: the same pause
// against a store started with -unfenced. The old leader's late write, with
// its old token, is accepted after its successor's — the lost update the
// fence prevents. It shows that TestPausedLeaderIsFenced's scenario really
// produces a stale write for the fence to refuse.
func TestPausedLeaderUnfencedControl(t *testing.T) {
	c := startCluster(t, testHeartbeat, 50*time.Millisecond, []string{"-unfenced"}, nil)
	_, oldEp, nextEp, before := c.pauseLeader()
	waitUntil(t, 20*time.Second, "the unfenced store accepts a late write under "+oldEp.String(), func() (bool, string) {
		st, err := c.storeStatus()
		if err != nil {
			return false, err.Error()
		}
		return st.AcceptedBy[oldEp.String()] > before, fmt.Sprintf("%+v", st)
	})
	st, err := c.storeStatus()
	if err != nil {
		t.Fatal(err)
	}
	if st.Refused != 0 {
		t.Errorf("the unfenced store refused %d writes: %+v", st.Refused, st)
	}
	if st.AcceptedBy[nextEp.String()] == 0 {
		t.Errorf("the successor %s never wrote: %+v", nextEp, st)
	}
	// pauseLeader resumed the old leader only after its successor's write
	// had reached the store, so the late write is a lost update: the store
	// counts it and writes the log line README.md quotes for -unfenced.
	if st.LostUpdates == 0 {
		t.Errorf("the unfenced store counts no lost update: %+v", st)
	}
	c.store.signal(syscall.SIGTERM) // exited, its whole log is read
	if code := c.store.wait(10 * time.Second); code != 0 {
		t.Errorf("store exited with %d after SIGTERM, want 0", code)
	}
	for _, msg := range readmeLogMessages(t, true) {
		if !strings.Contains(c.store.log.String(), msg) {
			t.Errorf("README.md quotes the -unfenced store's log line %s, which the store did not write in this run", msg)
		}
	}
}

// TestFaultEndpoint drives POST /fault, which the fault-injection suite
// relies on: isolating the leader's transport makes the others elect a new
// leader in a higher term while the isolated node loses its epoch; heal
// brings it back as a follower of the new term. Bad ops are refused.
func TestFaultEndpoint(t *testing.T) {
	c := startCluster(t, testHeartbeat, 50*time.Millisecond, nil, []string{"-fault-endpoint"})
	old, oldEp := c.leader(0, "")
	for _, bad := range []string{`{"op":"explode"}`, `{"op":"cut"}`, `{"op":"refuse"}`, `{"op":"drop","p":2}`, `{"op":`} {
		if status, reply, err := post(c.hc, c.nodeURL[old]+"/fault", bad); err != nil || status != http.StatusBadRequest {
			t.Errorf("POST /fault %s: %d %s %v; want 400", bad, status, reply, err)
		}
	}
	if status, reply, err := post(c.hc, c.nodeURL[old]+"/fault", `{"op":"isolate"}`); err != nil || status != http.StatusOK {
		t.Fatalf("isolate: %d %s %v", status, reply, err)
	}
	_, nextEp := c.leader(oldEp.Term, old)
	waitUntil(t, 20*time.Second, old+" loses its epoch while isolated", func() (bool, string) {
		st, err := c.status(old)
		return err == nil && st.Epoch == "", fmt.Sprintf("%+v %v", st, err)
	})
	if status, reply, err := post(c.hc, c.nodeURL[old]+"/fault", `{"op":"heal"}`); err != nil || status != http.StatusOK {
		t.Fatalf("heal: %d %s %v", status, reply, err)
	}
	waitUntil(t, 20*time.Second, old+" follows the new leader after heal", func() (bool, string) {
		st, err := c.status(old)
		return err == nil && st.State == "Follower" && st.Term >= nextEp.Term && st.Leader != "" && st.Leader != old,
			fmt.Sprintf("%+v %v", st, err)
	})
	c.waitRecordBy(nextEp)
}
