package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/internal/freeport"
)

// runGCPause is the README's pause for real: three `cluster node` processes
// (this binary, re-executed) and the fenced store. Each node's -write-every
// writer writes to the store while it leads. The leader's process is frozen
// with SIGSTOP — every goroutine, its Raft node, its writer: a
// stop-the-world pause nothing inside it can notice — until another node is
// elected and has written; then SIGCONT. The woken writer still holds its
// old token and writes with it; the store refuses it (-unfenced: accepts it
// over the new leader's data).
func runGCPause(ctx context.Context, e *env) (*summary, error) {
	st, err := e.addStore(ctx, "store", "sqlite", e.opts.unfenced)
	if err != nil {
		return nil, err
	}
	e.markStoreWrites(st)
	procs, err := e.startNodeProcs(ctx, st.url, nil)
	if err != nil {
		return nil, err
	}
	defer procs.stop()
	mode := "storage WITH fencing"
	if e.opts.unfenced {
		mode = "storage WITHOUT fencing (-unfenced)"
	}
	e.tl.print("scenario gc-pause: %s", mode)
	e.tl.print("  three `cluster node` processes on loopback TCP (raft-boltdb under %s): %s", e.dir, procs.describe())
	e.tl.print("  heartbeat %v, leader lease %v, each leader writes every %v; store at %s", e.opts.hb, e.lease(), gcWriteEvery, st.url)

	// A: the first leader, once the store holds its writes.
	aID, epA, err := procs.waitLeader(ctx, 0, "")
	if err != nil {
		return nil, err
	}
	e.tl.setLabel(aID, "A "+aID)
	e.tl.mark(event{Lane: aID, Kind: evElected, Term: epA.Term, Label: fmt.Sprintf("term %d", epA.Term)})
	endEpochA := e.tl.begin(aID, spanEpoch, epA.Term, fmt.Sprintf("epoch %d", epA.Term))
	e.tl.say("A "+aID, "leads with epoch %s (pid %d); its writer writes under it", epA, procs.byID[aID].Process.Pid)
	if err := waitFor(ctx, func() bool { return storeHolds(ctx, st, epA) }); err != nil {
		return nil, fmt.Errorf("no write under %s reached the store: %w", epA, err)
	}

	// The pause.
	a := procs.byID[aID]
	if err := a.Process.Signal(syscall.SIGSTOP); err != nil {
		return nil, err
	}
	stopped := time.Now()
	endPause := e.tl.begin(aID, spanPause, epA.Term, "SIGSTOP")
	e.tl.say("A "+aID, "kill -STOP %d: the whole process freezes (a stop-the-world GC pause, for real)", a.Process.Pid)

	bID, epB, err := procs.waitLeader(ctx, epA.Term, aID)
	if err != nil {
		return nil, err
	}
	endEpochA()
	e.tl.setLabel(bID, "B "+bID)
	e.tl.mark(event{Lane: bID, Kind: evElected, Term: epB.Term, Label: fmt.Sprintf("term %d", epB.Term)})
	e.tl.begin(bID, spanEpoch, epB.Term, fmt.Sprintf("epoch %d", epB.Term))
	e.tl.say("B "+bID, "elected leader of term %d: epoch %s", epB.Term, epB)
	if err := waitFor(ctx, func() bool { return storeHolds(ctx, st, epB) }); err != nil {
		return nil, fmt.Errorf("no write under %s reached the store: %w", epB, err)
	}
	e.tl.say("B "+bID, "its writes reach the store under %s", epB)
	before, err := st.c.status(ctx)
	if err != nil {
		return nil, err
	}

	// Wake A: its writer still holds the token of epA.
	if err := a.Process.Signal(syscall.SIGCONT); err != nil {
		return nil, err
	}
	pause := time.Since(stopped)
	endPause()
	e.tl.say("A "+aID, "kill -CONT %d after %dms (lease %v): it wakes still holding %s's token", a.Process.Pid, pause.Milliseconds(), e.lease(), epA)
	after, err := waitLate(ctx, st, epA, before)
	if err != nil {
		return nil, fmt.Errorf("the woken leader never wrote again: %w", err)
	}
	// Every write of A's the store accepted after B's is an update of B's
	// overwritten: lost.
	lateAccepted := after.AcceptedBy[epA.String()] - before.AcceptedBy[epA.String()]
	lost := 0
	if lateAccepted > 0 {
		lost = 1
		e.tl.say("result", "the store accepted %d write(s) under %s AFTER %s wrote: the new leader's update is LOST", lateAccepted, epA, epB)
	} else {
		rec, _, err := st.c.read(ctx, DefaultResource)
		if err != nil {
			return nil, err
		}
		e.tl.say("result", "data=%s (term %d by %s): the new leader's update survives", data(rec.Value), rec.Term, rec.Leader)
	}
	refused := after.RefusedBy[epA.String()]
	e.tl.say("store", "accepted=%d refused=%d highest=%s", after.Accepted, after.Refused, after.Highest[DefaultResource])
	sum := newSummary("gc-pause").
		add("fenced", !e.opts.unfenced).
		add("A", aID).add("epochA", epA).add("pidA", a.Process.Pid).
		add("B", bID).add("epochB", epB).
		add("pause", ms(pause)).add("lease", ms(e.lease())).
		add("refused", refused).add("late_accepted", lateAccepted).add("lost", lost)
	sum.ok = lost == 0 && refused > 0
	return sum, nil
}

// markStoreWrites puts every write the store counts on the timeline, on
// the lane of the leader its epoch names.
func (e *env) markStoreWrites(st *storeHandle) {
	st.st.cfg.OnWrite = func(ev writeEvent) {
		ep, err := epoch.Parse(ev.Epoch)
		if err != nil {
			return
		}
		kind := evAccepted
		if ev.Status != http.StatusOK {
			kind = evRefused
			e.tl.say(ep.Leader, "writes with %s -> REFUSED (%d: %s)", ep, ev.Status, ev.Reason)
		}
		e.tl.mark(event{Lane: ep.Leader, To: st.name, Kind: kind, Term: ep.Term, Label: fmt.Sprintf("%s t%d", kind, ep.Term)})
	}
}

// gcWriteEvery is how often a leading node process writes.
const gcWriteEvery = 100 * time.Millisecond

// storeHolds reports whether the register was last written under ep (or a
// later epoch of the same term, which cannot exist).
func storeHolds(ctx context.Context, st *storeHandle, ep epoch.Epoch) bool {
	rec, ok, err := st.c.read(ctx, DefaultResource)
	return err == nil && ok && rec.Term == ep.Term && rec.Leader == ep.Leader
}

// nodeProcs are node processes started by the scenario.
type nodeProcs struct {
	ids  []string
	byID map[string]*exec.Cmd
	url  map[string]string // id -> http://addr
	raft map[string]string
	done map[string]chan struct{}
	hc   *http.Client
}

// startNodeProcs starts three `cluster node` processes bootstrapped as one
// cluster, writing to storeURL with the env's token key: on loopback, or
// with lab set each on a host of its own (lab.hosts), reached from
// lab.client.
func (e *env) startNodeProcs(ctx context.Context, storeURL string, lab *labHosts) (*nodeProcs, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{DisableKeepAlives: true}
	if lab != nil {
		tr.DialContext = lab.client.DialContext
	}
	p := &nodeProcs{byID: map[string]*exec.Cmd{}, url: map[string]string{}, raft: map[string]string{},
		done: map[string]chan struct{}{}, hc: &http.Client{Timeout: time.Second, Transport: tr}}
	var addrs []string
	httpAddr := func(int) string { return "127.0.0.1:0" }
	if lab != nil {
		for _, h := range lab.nodes {
			addrs = append(addrs, h.HostPort(labRaftPort))
		}
		httpAddr = func(i int) string { return lab.nodes[i].HostPort(labHTTPPort) }
	} else if addrs, err = freeAddrs(3); err != nil {
		return nil, err
	}
	var boot []string
	for i := range 3 {
		id := fmt.Sprintf("n%d", i+1)
		p.ids = append(p.ids, id)
		p.raft[id] = addrs[i]
		boot = append(boot, id+"="+addrs[i])
	}
	e.tl.addLanes(p.ids...)
	for i, id := range p.ids {
		af := filepath.Join(e.dir, id+".addr")
		args := []string{"node", "-id", id, "-raft", p.raft[id], "-http", httpAddr(i),
			"-data", filepath.Join(e.dir, id), "-bootstrap", strings.Join(boot, ","),
			"-store", storeURL, "-token-key", filepath.Join(e.dir, "token.key"),
			"-heartbeat", e.opts.hb.String(), "-write-every", gcWriteEvery.String(), "-addr-file", af}
		args = append(args, e.nodeArgs...)
		cmd := exec.Command(exe, args...)
		if lab != nil {
			// ip netns exec becomes the node: signals reach it.
			cmd = lab.nodes[i].Command(context.Background(), exe, args...)
		}
		var out io.Writer = e.logOut
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			p.stop()
			return nil, err
		}
		p.byID[id] = cmd
		done := make(chan struct{})
		p.done[id] = done
		go func() {
			_ = cmd.Wait()
			close(done)
		}()
	}
	for _, id := range p.ids {
		af := filepath.Join(e.dir, id+".addr")
		var content string
		err := waitFor(ctx, func() bool {
			b, err := os.ReadFile(af)
			content = strings.TrimSpace(string(b))
			return err == nil && content != ""
		})
		if err != nil {
			p.stop()
			return nil, fmt.Errorf("node %s never wrote its address file: %w", id, err)
		}
		for _, f := range strings.Fields(content) {
			if k, v, ok := strings.Cut(f, "="); ok && k == "http" {
				p.url[id] = "http://" + v
			}
		}
	}
	return p, nil
}

// freeAddrs returns n loopback addresses that were free a moment ago (the
// Raft addresses must be known before the nodes start, for -bootstrap).
func freeAddrs(n int) ([]string, error) { return freeport.Addrs(n) }

func (p *nodeProcs) describe() string {
	var s []string
	for _, id := range p.ids {
		s = append(s, fmt.Sprintf("%s=%s (pid %d, %s)", id, p.raft[id], p.byID[id].Process.Pid, p.url[id]))
	}
	return strings.Join(s, " ")
}

// waitLeader polls the nodes (except one) until one reports an epoch above
// minTerm.
func (p *nodeProcs) waitLeader(ctx context.Context, minTerm uint64, except string) (string, epoch.Epoch, error) {
	var id string
	var ep epoch.Epoch
	err := waitFor(ctx, func() bool {
		for _, n := range p.ids {
			if n == except {
				continue
			}
			var st nodeStatus
			if err := p.getStatus(ctx, n, &st); err != nil || st.Epoch == "" {
				continue
			}
			if e, err := epoch.Parse(st.Epoch); err == nil && e.Term > minTerm && e.Leader == n {
				id, ep = n, e
				return true
			}
		}
		return false
	})
	if err != nil {
		return "", epoch.Epoch{}, fmt.Errorf("no node process took an epoch above term %d: %w", minTerm, err)
	}
	return id, ep, nil
}

func (p *nodeProcs) getStatus(ctx context.Context, id string, st *nodeStatus) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url[id]+"/status", nil)
	if err != nil {
		return err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(st)
}

// stop resumes (if stopped) and terminates every node process, killing
// those that do not exit within a few seconds.
func (p *nodeProcs) stop() {
	for _, id := range p.ids {
		if cmd := p.byID[id]; cmd != nil && cmd.Process != nil {
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.After(5 * time.Second)
	for _, id := range p.ids {
		done, ok := p.done[id]
		if !ok {
			continue
		}
		select {
		case <-done:
		case <-deadline:
			_ = p.byID[id].Process.Kill()
			<-done
		}
	}
	p.hc.CloseIdleConnections()
}

// index returns the position of node id.
func (p *nodeProcs) index(id string) int { return slices.Index(p.ids, id) }
