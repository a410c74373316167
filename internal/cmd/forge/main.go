// Command forge is a hostile Raft peer for the fault suite: a process that
// is not a member of the cluster and sends each target node, over plain
// TCP with a raw hashicorp/raft NetworkTransport, hostile RPCs drawn from
// internal/hostile — the generator FuzzLiveCluster fuzzes live clusters
// with: first the named attacks (hostile.Attacks:
// nil entries, configurations that do not decode, the 8 MiB frame, terms
// 2^62 to 2^64-2 as strangers, nobody and members, TimeoutNow from
// strangers...), then -count random inputs from -seed; of both only the
// RPCs a correct node refuses whatever its state (hostile.Op.MustRefuse),
// since forge knows neither the leader nor the terms. Every one of them
// must be refused.
//
//	forge -targets 127.0.0.1:7101,127.0.0.1:7102 [-members n1=127.0.0.1:7101,...] [-seed N] [-count 20] [-named=false] [-timeout 2s]
//
// It prints one line per RPC and a summary, and exits 0 if every RPC was
// answered with an error, 1 if any was accepted (raft handled it), 2 on a
// usage error.
package main

import (
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/internal/hostile"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout)) }

// member is a server the forger claims to be.
type member struct{ id, addr string }

func run(args []string, out io.Writer) int {
	fs := flag.NewFlagSet("forge", flag.ContinueOnError)
	fs.SetOutput(out)
	targets := fs.String("targets", "", "comma-separated raft addresses to attack (required)")
	members := fs.String("members", "", "comma-separated id=addr of the cluster's members, to claim to be them with impossible terms")
	timeout := fs.Duration("timeout", 2*time.Second, "I/O deadline of each RPC")
	seed := fs.Int64("seed", time.Now().UnixNano(), "seed of the random inputs")
	count := fs.Int("count", 20, "random inputs to draw from the generator")
	named := fs.Bool("named", true, "send the named attacks (hostile.Attacks) first")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *targets == "" {
		fmt.Fprintln(out, "forge: -targets is required")
		return 2
	}
	var ms []member
	for _, kv := range strings.Split(*members, ",") {
		if kv == "" {
			continue
		}
		id, addr, ok := strings.Cut(kv, "=")
		if !ok || id == "" || addr == "" {
			fmt.Fprintf(out, "forge: -members entry %q is not id=addr\n", kv)
			return 2
		}
		ms = append(ms, member{id, addr})
	}
	tr, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 1, *timeout, hclog.NewNullLogger())
	if err != nil {
		fmt.Fprintf(out, "forge: %v\n", err)
		return 2
	}
	defer tr.Close()
	self := string(tr.LocalAddr())
	accepted, sent := 0, 0
	addrs := strings.Split(*targets, ",")
	view := hostile.View{Self: self}
	for _, t := range addrs {
		id := "target-" + t
		for _, m := range ms {
			if m.addr == t {
				id = m.id
			}
		}
		view.Members = append(view.Members, hostile.Peer{ID: id, Addr: t, Voter: true})
	}
	rng := rand.New(rand.NewSource(*seed))
	var ops []hostile.Op
	for i := range addrs { // each target in turn: Attacks aims at the one after the "leader"
		if !*named {
			break
		}
		v := view
		v.Leader = func() int { return (i + len(addrs) - 1) % len(addrs) }
		for _, op := range hostile.Attacks(v) {
			// forge does not know the leader: a TimeoutNow claiming a
			// member may be the leader's own.
			if op.MustRefuse && !(op.Kind == hostile.TimeoutNow && strings.Contains(op.Name, "does not lead")) {
				ops = append(ops, op)
			}
		}
	}
	for range *count {
		b := make([]byte, rng.Intn(200))
		rng.Read(b)
		for _, op := range hostile.Generate(b, view) {
			if op.MustRefuse {
				ops = append(ops, op)
			}
		}
	}
	fmt.Fprintf(out, "forge: seed %d, %d rpcs\n", *seed, len(ops))
	for _, op := range ops {
		target := view.Members[op.Target].Addr
		sent++
		err := hostile.Send(tr, target, op, *timeout)
		if err == nil {
			accepted++
			fmt.Fprintf(out, "%s %s: ACCEPTED\n", target, op.Name)
			continue
		}
		fmt.Fprintf(out, "%s %s: refused: %s\n", target, op.Name, firstLine(err.Error()))
	}
	fmt.Fprintf(out, "forge: sent=%d accepted=%d\n", sent, accepted)
	if accepted > 0 {
		return 1
	}
	return 0
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
