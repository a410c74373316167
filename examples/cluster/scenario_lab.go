package main

import (
	"context"
	"fmt"
	"net/http"
	"syscall"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/internal/netlab"
)

// Ports on the lab's hosts: each process has a host of its own.
const (
	labRaftPort  = 7101
	labHTTPPort  = 8080
	labStorePort = 7000
)

// labHosts are the lab's machines as the scenario uses them.
type labHosts struct {
	lab    *netlab.Lab
	nodes  []*netlab.Host // n1, n2, n3: one `cluster node` process each
	store  *netlab.Host   // the fenced store (served by this process)
	client *netlab.Host   // where this process talks to the nodes from
}

// runLab is the story on three machines: three `cluster node` processes,
// each on a host of its own (a Linux network namespace with its own
// address and TCP stack, cabled to a bridge: internal/netlab), and the
// store on a fourth. Act one: the leader A is paused with SIGSTOP; B is
// elected and writes; A, continued, writes with its old token. Act two: the
// kernel partitions the leader B from the other nodes and the store
// (packets dropped at the receivers, nobody told); C is elected and
// writes; the partition heals, and B's writes, held in its TCP send queue
// all along, reach the store late. The fenced store refuses both late
// leaders; -unfenced, their writes land over their successors'.
func runLab(ctx context.Context, e *env) (*summary, error) {
	lab, err := netlab.New(ctx, netlab.Config{Hosts: []string{"n1", "n2", "n3", "store", "client"}})
	if err != nil {
		return nil, fmt.Errorf("-lab builds hosts out of Linux network namespaces and needs root and iproute2: %w", err)
	}
	defer lab.Close()
	hosts := &labHosts{lab: lab, nodes: lab.Hosts()[:3], store: lab.Host("store"), client: lab.Host("client")}
	ln, err := hosts.store.Listen(ctx, "tcp", hosts.store.HostPort(labStorePort))
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: hosts.client.DialContext}}
	st, err := e.addStoreOn(ctx, "store", "sqlite", e.opts.unfenced, ln, hc)
	if err != nil {
		return nil, err
	}
	defer st.stop()
	e.markStoreWrites(st)
	procs, err := e.startNodeProcs(ctx, st.url, hosts)
	if err != nil {
		return nil, err
	}
	defer procs.stop()
	mode := "storage WITH fencing"
	if e.opts.unfenced {
		mode = "storage WITHOUT fencing (-unfenced)"
	}
	e.tl.print("scenario lab: %s, on three machines", mode)
	e.tl.print("  lab %s: each host a network namespace with its own TCP stack, cabled to one bridge; addresses from 198.18.0.0/15, no route out", lab.Name())
	e.tl.print("  nodes (`cluster node`, raft-boltdb under %s): %s", e.dir, procs.describe())
	e.tl.print("  store on %s at %s; this process talks to the nodes from %s", hosts.store, st.url, hosts.client)
	e.tl.print("  heartbeat %v, leader lease %v, each leader writes every %v", e.opts.hb, e.lease(), gcWriteEvery)
	hostOf := func(id string) *netlab.Host { return hosts.nodes[procs.index(id)] }

	// Act one: the paused leader.
	aID, epA, err := procs.waitLeader(ctx, 0, "")
	if err != nil {
		return nil, err
	}
	e.tl.setLabel(aID, "A "+aID)
	e.tl.mark(event{Lane: aID, Kind: evElected, Term: epA.Term, Label: fmt.Sprintf("term %d", epA.Term)})
	endEpochA := e.tl.begin(aID, spanEpoch, epA.Term, fmt.Sprintf("epoch %d", epA.Term))
	e.tl.say("A "+aID, "leads with epoch %s on host %s (pid %d)", epA, hostOf(aID), procs.byID[aID].Process.Pid)
	if err := waitFor(ctx, func() bool { return storeHolds(ctx, st, epA) }); err != nil {
		return nil, fmt.Errorf("no write under %s reached the store: %w", epA, err)
	}
	a := procs.byID[aID]
	if err := a.Process.Signal(syscall.SIGSTOP); err != nil {
		return nil, err
	}
	stopped := time.Now()
	endPause := e.tl.begin(aID, spanPause, epA.Term, "SIGSTOP")
	e.tl.say("A "+aID, "kill -STOP %d on %s: the whole process freezes", a.Process.Pid, hostOf(aID).Name())
	bID, epB, err := procs.waitLeader(ctx, epA.Term, aID)
	if err != nil {
		return nil, err
	}
	endEpochA()
	e.tl.setLabel(bID, "B "+bID)
	e.tl.mark(event{Lane: bID, Kind: evElected, Term: epB.Term, Label: fmt.Sprintf("term %d", epB.Term)})
	endEpochB := e.tl.begin(bID, spanEpoch, epB.Term, fmt.Sprintf("epoch %d", epB.Term))
	e.tl.say("B "+bID, "elected leader of term %d on host %s: epoch %s", epB.Term, hostOf(bID), epB)
	if err := waitFor(ctx, func() bool { return storeHolds(ctx, st, epB) }); err != nil {
		return nil, fmt.Errorf("no write under %s reached the store: %w", epB, err)
	}
	// A is frozen: whatever of A's the store counts from now on is late.
	before, err := st.c.status(ctx)
	if err != nil {
		return nil, err
	}
	if err := a.Process.Signal(syscall.SIGCONT); err != nil {
		return nil, err
	}
	pause := time.Since(stopped)
	endPause()
	e.tl.say("A "+aID, "kill -CONT %d after %dms (lease %v): it wakes still holding %s's token", a.Process.Pid, pause.Milliseconds(), e.lease(), epA)
	afterA, err := waitLate(ctx, st, epA, before)
	if err != nil {
		return nil, fmt.Errorf("the woken leader A never wrote again: %w", err)
	}
	refusedA := afterA.RefusedBy[epA.String()] - before.RefusedBy[epA.String()]
	lateA := afterA.AcceptedBy[epA.String()] - before.AcceptedBy[epA.String()]
	e.tl.say("store", "after A's pause: %d late write(s) of A's refused, %d accepted", refusedA, lateA)

	// Act two: the partitioned leader.
	if err := waitFor(ctx, func() bool { return storeHolds(ctx, st, epB) }); err != nil {
		return nil, fmt.Errorf("the writes of B, the leader, stopped reaching the store: %w", err)
	}
	var rest []*netlab.Host
	for _, id := range procs.ids {
		if id != bID {
			rest = append(rest, hostOf(id))
		}
	}
	rest = append(rest, hosts.store)
	if err := lab.Partition(ctx, netlab.Silent, []*netlab.Host{hostOf(bID)}, rest); err != nil {
		return nil, err
	}
	cut := time.Now()
	endCut := e.tl.begin(bID, spanPause, epB.Term, "partitioned")
	e.tl.say("B "+bID, "partitioned by the kernel: its packets to the other nodes and the store are dropped on arrival, and theirs to it (nobody is told); B runs on")
	cID, epC, err := procs.waitLeader(ctx, epB.Term, bID)
	if err != nil {
		return nil, err
	}
	endEpochB()
	e.tl.setLabel(cID, "C "+cID)
	e.tl.mark(event{Lane: cID, Kind: evElected, Term: epC.Term, Label: fmt.Sprintf("term %d", epC.Term)})
	e.tl.begin(cID, spanEpoch, epC.Term, fmt.Sprintf("epoch %d", epC.Term))
	e.tl.say("C "+cID, "elected leader of term %d on host %s: epoch %s", epC.Term, hostOf(cID), epC)
	if err := waitFor(ctx, func() bool { return storeHolds(ctx, st, epC) }); err != nil {
		return nil, fmt.Errorf("no write under %s reached the store: %w", epC, err)
	}
	e.tl.say("C "+cID, "its writes reach the store under %s", epC)
	// B is cut off: whatever of B's the store counts from now on is late.
	before, err = st.c.status(ctx)
	if err != nil {
		return nil, err
	}
	if err := lab.Heal(ctx); err != nil {
		return nil, err
	}
	partition := time.Since(cut)
	endCut()
	e.tl.say("B "+bID, "the partition heals after %dms: B's writes under %s, held in its TCP send queue, are retransmitted", partition.Milliseconds(), epB)
	afterB, err := waitLate(ctx, st, epB, before)
	if err != nil {
		return nil, fmt.Errorf("no late write of the partitioned leader B reached the store: %w", err)
	}
	refusedB := afterB.RefusedBy[epB.String()] - before.RefusedBy[epB.String()]
	lateB := afterB.AcceptedBy[epB.String()] - before.AcceptedBy[epB.String()]
	e.tl.say("store", "after B's partition: %d late write(s) of B's refused, %d accepted", refusedB, lateB)

	lost := 0
	if lateA > 0 {
		lost++
		e.tl.say("result", "the store accepted %d write(s) under %s AFTER %s wrote: B's update is LOST", lateA, epA, epB)
	}
	if lateB > 0 {
		lost++
		e.tl.say("result", "the store accepted %d write(s) under %s AFTER %s wrote: C's update is LOST", lateB, epB, epC)
	}
	if lost == 0 {
		rec, _, err := st.c.read(ctx, DefaultResource)
		if err != nil {
			return nil, err
		}
		e.tl.say("result", "data=%s (term %d by %s): no late write of a deposed leader landed", data(rec.Value), rec.Term, rec.Leader)
	}
	sum := newSummary("lab").
		add("fenced", !e.opts.unfenced).
		add("A", aID).add("epochA", epA).add("pause", ms(pause)).
		add("B", bID).add("epochB", epB).add("partition", ms(partition)).
		add("C", cID).add("epochC", epC).add("lease", ms(e.lease())).
		add("refused_paused", refusedA).add("refused_partitioned", refusedB).
		add("late_accepted", lateA+lateB).add("lost", lost)
	sum.ok = lost == 0 && refusedA > 0 && refusedB > 0
	return sum, nil
}

// waitLate waits until the store has counted a write under ep (refused or
// accepted) beyond those counted in before, and returns its status then.
func waitLate(ctx context.Context, st *storeHandle, ep epoch.Epoch, before storeStatus) (storeStatus, error) {
	var after storeStatus
	err := waitFor(ctx, func() bool {
		s, err := st.c.status(ctx)
		if err != nil {
			return false
		}
		after = s
		return s.RefusedBy[ep.String()] > before.RefusedBy[ep.String()] || s.AcceptedBy[ep.String()] > before.AcceptedBy[ep.String()]
	})
	return after, err
}
