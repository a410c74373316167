package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/termfence/termfence/internal/netlab"
)

// labFault is one partition the kernel makes in netlab mode.
type labFault struct {
	// kind: "link-down" (node From's cable pulled: silent, also to the
	// clients), "isolate" (every link between From and the other nodes
	// and the store cut both ways, as Mode says), "cut" (the link between
	// From and To cut both ways) or "one-way" (From's packets to To
	// blocked, the other direction untouched).
	kind string
	mode netlab.Mode // for isolate, cut and one-way
	from int         // a node index
	to   int         // for cut and one-way: a node index, or storeIndex
}

// storeIndex names the store as a labFault's To.
const storeIndex = -1

// labFaultKinds are the kinds of labFault, in the order the nemesis draws
// them.
var labFaultKinds = []string{"link-down", "isolate", "cut", "one-way"}

// name is the fault's key in the run's fault counts.
func (f labFault) name() string {
	if f.kind == "link-down" {
		return "lab:link-down"
	}
	return fmt.Sprintf("lab:%s-%v", f.kind, f.mode)
}

// labHost returns node i's host, or the store's for storeIndex.
func (c *cluster) labHost(i int) *netlab.Host {
	if i == storeIndex {
		return c.store.host
	}
	return c.nodes[i].proc.host
}

func (c *cluster) labName(i int) string {
	if i == storeIndex {
		return "store"
	}
	return c.nodes[i].id
}

// describe says what f does, for the run's log.
func (c *cluster) describe(f labFault) string {
	switch f.kind {
	case "link-down":
		return "link down: " + c.labName(f.from)
	case "isolate":
		return fmt.Sprintf("isolate %s from the nodes and the store (%v)", c.labName(f.from), f.mode)
	case "cut":
		return fmt.Sprintf("cut %s<->%s (%v)", c.labName(f.from), c.labName(f.to), f.mode)
	default:
		return fmt.Sprintf("one-way %s->%s (%v)", c.labName(f.from), c.labName(f.to), f.mode)
	}
}

// applyLabFault makes the kernel apply f. The clients' host is never cut
// except by link-down, which pulls the node's only cable.
func (c *cluster) applyLabFault(ctx context.Context, f labFault) error {
	from := c.labHost(f.from)
	switch f.kind {
	case "link-down":
		return c.lab.Isolate(from)
	case "isolate":
		var rest []*netlab.Host
		for i := range c.nodes {
			if i != f.from {
				rest = append(rest, c.labHost(i))
			}
		}
		rest = append(rest, c.store.host)
		return c.lab.Partition(ctx, f.mode, []*netlab.Host{from}, rest)
	case "cut":
		return c.lab.Partition(ctx, f.mode, []*netlab.Host{from}, []*netlab.Host{c.labHost(f.to)})
	case "one-way":
		return c.lab.Block(ctx, from, c.labHost(f.to), f.mode)
	}
	return fmt.Errorf("chaos: unknown lab fault %q", f.kind)
}

// drawLabFault draws a lab fault from the seed: node i (the leader when
// isolateLeader), a kind, a mode, and a peer j or the store.
func (n *nemesis) drawLabFault(i int, isolateLeader bool, j int) labFault {
	f := labFault{kind: labFaultKinds[n.rng.Intn(len(labFaultKinds))], mode: netlab.Modes()[n.rng.Intn(len(netlab.Modes()))]}
	toStore := n.rng.Intn(4) == 0
	if isolateLeader {
		if li, _ := n.w.leader(); li >= 0 {
			i = li
		}
	}
	if j == i {
		j = (i + 1) % len(n.c.nodes)
	}
	f.from, f.to = i, j
	if toStore {
		f.to = storeIndex
	}
	return f
}

// labPartition applies a lab fault for d, then heals the lab.
func (n *nemesis) labPartition(ctx context.Context, f labFault, d time.Duration) error {
	from := n.w.rec.Now()
	if err := n.c.applyLabFault(ctx, f); err != nil {
		return err
	}
	n.labCounts[f.name()]++
	n.logf("fault %d: netlab: %s for %v [%s]", n.faults+1, n.c.describe(f), d.Round(time.Millisecond), strings.Join(n.c.lab.Faults(), "; "))
	sleepCtx(ctx, d)
	err := n.healAll(ctx)
	if f.cutsStore() {
		n.c.noteStoreCut(f.from, from, n.w.rec.Now())
	}
	return err
}

// cutsStore reports whether f cuts node From's link to the store.
func (f labFault) cutsStore() bool {
	switch f.kind {
	case "link-down", "isolate":
		return true
	}
	return f.to == storeIndex
}
