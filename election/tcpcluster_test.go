package election

import (
	"fmt"
	"testing"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/transport"
)

// tcpCluster is a cluster of Elections on transport.NewTCP over loopback,
// with bolt stores, fed to one invariant checker.
type tcpCluster struct {
	t     testing.TB
	check *checker
	nodes []*tcpNode
	// ht, et and llt are the nodes' timeouts: tcpHT, tcpET, tcpLLT.
	ht, et, llt time.Duration
}

// The TCP clusters' timeouts: four times the in-memory ones. Real sockets,
// bolt stores and (in the TLS tests) handshakes under the race detector on
// a loaded 2-core machine miss a 25 ms lease several times a second, and
// the hostile tests need a cluster that keeps its leader long enough to
// tell a forged RPC's effect from raft's own timeouts.
const (
	tcpHT  = 4 * testHT
	tcpET  = 4 * testET
	tcpLLT = 4 * testLLT
)

type tcpNode struct {
	id, addr string
	tr       transport.Transport
	el       *Election
}

// newTCPCluster starts one bootstrapped voter per id. trCfg, if set, gives
// each node's transport.Config (its Logger is set here). Cleanup closes
// every node still open and verifies the checker.
func newTCPCluster(t testing.TB, ids []string, trCfg func(id string) transport.Config) *tcpCluster {
	t.Helper()
	c := &tcpCluster{t: t, check: newChecker(testCluster), ht: tcpHT, et: tcpET, llt: tcpLLT}
	var boot []Server
	for _, id := range ids {
		var cfg transport.Config
		if trCfg != nil {
			cfg = trCfg(id)
		}
		cfg.Logger = c.check.logger(id)
		tr, err := transport.NewTCP("127.0.0.1:0", "", cfg)
		if err != nil {
			t.Fatalf("NewTCP(%s): %v", id, err)
		}
		c.nodes = append(c.nodes, &tcpNode{id: id, addr: string(tr.LocalAddr()), tr: tr})
		boot = append(boot, Server{ID: id, Addr: string(tr.LocalAddr())})
	}
	t.Cleanup(func() {
		for _, nd := range c.nodes {
			if nd.el != nil {
				_ = nd.el.Close()
			} else {
				_ = nd.tr.Close()
			}
		}
		c.check.verify(t)
		if t.Failed() {
			c.check.dumpLog(t)
		}
	})
	for _, nd := range c.nodes {
		el, err := New(Config{
			ID: nd.id, Cluster: testCluster, DataDir: t.TempDir(), Transport: nd.tr, Bootstrap: boot,
			HeartbeatTimeout: c.ht, ElectionTimeout: c.et, LeaderLeaseTimeout: c.llt,
			Logger: c.check.logger(nd.id),
		})
		if err != nil {
			t.Fatalf("New(%s): %v", nd.id, err)
		}
		nd.el = el
	}
	return c
}

// settleWait bounds leaderAbove: three times the usual wait, as at these
// timeouts, on a machine loaded enough, raft can take a while to settle on
// a leader all follow.
var settleWait = 3 * waitLong

// leaderAbove waits for a node holding an epoch above term and for every
// other node to follow it.
func (c *tcpCluster) leaderAbove(term uint64) (*tcpNode, epoch.Epoch) {
	c.t.Helper()
	var ld *tcpNode
	var ep epoch.Epoch
	waitForUpTo(c.t, settleWait, fmt.Sprintf("a leader above term %d followed by all", term), func() bool {
		var ok bool
		ld, ep, ok = c.settledAbove(term)
		return ok
	})
	return ld, ep
}

// settledAbove reports a node holding an epoch above term that every other
// node follows, if there is one now.
func (c *tcpCluster) settledAbove(term uint64) (*tcpNode, epoch.Epoch, bool) {
	var ld *tcpNode
	var ep epoch.Epoch
	for _, nd := range c.nodes {
		if e, err := nd.el.Epoch(); err == nil && e.Term > term {
			c.check.epoch("poll", nd.id, e)
			ld, ep = nd, e
		}
	}
	if ld == nil {
		return nil, ep, false
	}
	for _, nd := range c.nodes {
		if _, id := nd.el.Raft().LeaderWithID(); string(id) != ld.id || nd.el.Raft().CurrentTerm() != ep.Term {
			return nil, ep, false
		}
	}
	return ld, ep, true
}
