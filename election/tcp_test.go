package election

import (
	"errors"
	"fmt"
	"testing"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/transport"
)

// TestTCPLoopback runs three nodes over transport.NewTCP on loopback with
// bolt stores: a leader is elected, closes gracefully (handing over), and
// another node takes over with a newer epoch.
func TestTCPLoopback(t *testing.T) {
	check := newChecker(testCluster)
	var trs []transport.Transport
	var boot []Server
	for i := range 3 {
		id := fmt.Sprintf("t%d", i+1)
		tr, err := transport.NewTCP("127.0.0.1:0", "", transport.Config{Logger: check.logger(id)})
		if err != nil {
			t.Fatalf("NewTCP: %v", err)
		}
		trs = append(trs, tr)
		boot = append(boot, Server{ID: id, Addr: string(tr.LocalAddr())})
	}
	els := make([]*Election, 3)
	for i, tr := range trs {
		el, err := New(Config{
			ID: boot[i].ID, Cluster: testCluster, DataDir: t.TempDir(), Transport: tr, Bootstrap: boot,
			HeartbeatTimeout: testHT, ElectionTimeout: testET, LeaderLeaseTimeout: testLLT,
			Logger: check.logger(boot[i].ID),
		})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		els[i] = el
		defer el.Close()
	}
	// leaderAbove waits for a node holding an epoch above term.
	leaderAbove := func(term uint64) (*Election, epoch.Epoch) {
		var ld *Election
		var ep epoch.Epoch
		waitFor(t, fmt.Sprintf("a leader above term %d", term), func() bool {
			for i, el := range els {
				if e, err := el.Epoch(); err == nil && e.Term > term {
					check.epoch("poll", boot[i].ID, e)
					ld, ep = el, e
					return true
				}
			}
			return false
		})
		return ld, ep
	}
	ld, ep := leaderAbove(0)
	for _, el := range els {
		if _, err := el.WaitLeader(ctxTimeout(t)); err != nil {
			t.Fatalf("WaitLeader: %v", err)
		}
	}
	if err := ld.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := ld.Epoch(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Epoch after Close: %v", err)
	}
	leaderAbove(ep.Term)
	check.verify(t)
}
