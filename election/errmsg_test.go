package election

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// TestAddrErrorOnePrefix: a refused member address reads "election:
// invalid member address: …" once, not with both sentinels' prefixes
// ("election: invalid argument: election: invalid member address"), and
// still matches both.
func TestAddrErrorOnePrefix(t *testing.T) {
	e := &Election{raftNode: &raftNode{localAddr: "127.0.0.1:7101"}}
	for _, addr := range []string{"", "nohost", "h:0"} {
		err := e.checkAddr(addr)
		if !errors.Is(err, ErrInvalidAddress) || !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("checkAddr(%q) = %v, want ErrInvalidAddress and ErrInvalidArgument", addr, err)
		}
		if msg := err.Error(); strings.Count(msg, "election:") != 1 || !strings.HasPrefix(msg, "election: invalid member address: ") {
			t.Errorf("checkAddr(%q) says %q: want one prefix", addr, msg)
		}
	}
}

// TestTransferToSelf: on the leader, TransferTo its own ID asks for
// nothing and succeeds (it was ErrUnknownServer, a 404 from the example's
// /transfer); on a follower it is ErrNotLeader naming the leader, who can
// hand over to it.
func TestTransferToSelf(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	ld, _ := c.leader()
	if err := ld.el.TransferTo(ctx, ld.id); err != nil {
		t.Fatalf("TransferTo(own ID) on the leader: %v, want nil", err)
	}
	if stateOf(ld) != raft.Leader {
		t.Fatalf("%s stopped leading after TransferTo its own ID", ld.id)
	}
	for _, nd := range c.nodes {
		if nd == ld {
			continue
		}
		if err := nd.el.TransferTo(ctx, nd.id); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("TransferTo(own ID) on follower %s: %v, want ErrNotLeader", nd.id, err)
		}
	}
}
