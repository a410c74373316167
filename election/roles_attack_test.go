package election

import (
	"context"
	"testing"

	"github.com/hashicorp/raft"
)

// TestAttackForgedRoleRenewal: a RequestPreVote at term 0 is a role renewal
// (roleslease.go), taken out of the RPC stream before admission. A forged
// one, from a stranger's ID or from a non-member claiming a member's ID at
// another address, must be refused with an error, as admission refuses an
// RPC (the fault suite's hostile peer counts an answer without an error as
// admitted; a chaos run with roles saw "RequestPreVote as a
// 300-byte ID term 0: ACCEPTED"), and must leave the leader's view of its
// members alone: no entry for the stranger, no applied index moved for the
// member it named.
func TestAttackForgedRoleRenewal(t *testing.T) {
	c := newTCPCluster(t, []string{"v1", "v2", "v3"}, nil)
	ld, _ := c.leaderAbove(0)
	// With a role the leader serves renewals (decide), not only refuses
	// them.
	waitForUpTo(t, 3*waitLong, "a role added and owned", func() bool {
		ld, _ = c.leaderAbove(0)
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		defer cancel()
		return ld.el.AddRoles(ctx, "job") == nil && ld.el.RoleOwners()["job"] != ""
	})
	named := c.followerOf(ld)
	stranger := plainStranger(t)
	for _, h := range []raft.RPCHeader{
		hdr(string(make([]byte, 300)), "127.0.0.1:1"),
		hdr("intruder", "127.0.0.1:1"),
		hdr(named.id, "127.0.0.1:1"),
	} {
		err := stranger.(raft.WithPreVote).RequestPreVote("", raft.ServerAddress(ld.addr), &raft.RequestPreVoteRequest{
			RPCHeader: h, Term: 0, LastLogIndex: 1 << 40,
		}, &raft.RequestPreVoteResponse{})
		if err == nil {
			t.Errorf("a forged renewal as %q at %s was answered without an error", truncate(string(h.ID)), h.Addr)
		}
	}
	rs := ld.el.roles
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for id, m := range rs.ls.members {
		if id != "v1" && id != "v2" && id != "v3" {
			t.Errorf("the leader keeps a member view for %q", truncate(id))
		}
		if m.applied >= 1<<40 {
			t.Errorf("a forged renewal moved %q's applied index to %d", truncate(id), m.applied)
		}
	}
}

func truncate(s string) string {
	if len(s) > 16 {
		return s[:16] + "..."
	}
	return s
}
