package election

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/transport"
)

// refusedAs sends one RPC through send and checks that nd's admission
// layer refused it for reason (or admitted it, reason 0).
func refusedAs(t *testing.T, nd *node, what string, reason RefusalReason, send func() error) {
	t.Helper()
	before := nd.el.Admission()
	err := send()
	after := nd.el.Admission()
	if reason == 0 {
		if after.Admitted == before.Admitted {
			t.Errorf("%s to %s: not admitted (err %v)", what, nd.id, err)
		}
		return
	}
	if !errors.Is(err, ErrRefused) { // in memory the error value itself travels
		t.Errorf("%s to %s: err %v, want ErrRefused", what, nd.id, err)
	}
	if d := after.Refused[reason] - before.Refused[reason]; d != 1 {
		t.Errorf("%s to %s: %d refusals as %s (err %v); stats %v", what, nd.id, d, reason, err, after.Refused)
	}
}

// TestAdmissionRules checks each rule of the admission layer on an
// in-memory cluster: claims that do not match the configuration (wrong
// address, a non-voter asking for votes), a TimeoutNow to a non-voter or
// from a member that does not lead, and a node with no configuration yet,
// which accepts the first leader that appends and votes only for the
// server that appended to it.
func TestAdmissionRules(t *testing.T) {
	c := newCluster(t, 3)
	ld, _ := c.leader()
	ctx := ctxTimeout(t)
	n5 := c.join("n5")
	c.quietly("AddNonvoter n5", func() error {
		ld, _ = c.leader()
		return ld.el.Raft().AddNonvoter("n5", "n5", 0, 0).Error()
	})
	waitFor(t, "n5 to follow "+ld.id, func() bool {
		_, id := n5.el.Raft().LeaderWithID()
		return string(id) == ld.id
	})

	// A node outside the cluster, connected to everyone.
	x := transport.NewInmem("x")
	for _, nd := range c.nodes {
		x.Connect(nd.mem)
	}
	var follower *node
	for _, nd := range c.nodes {
		if nd != ld && nd != n5 {
			follower = nd
		}
	}
	term := follower.el.Raft().CurrentTerm()
	to := func(nd *node) raft.ServerAddress { return raft.ServerAddress(nd.id) }

	refusedAs(t, follower, "RequestVote from the leader's ID at another address", RefusedNotVoter, func() error {
		return x.RequestVote("", to(follower), &raft.RequestVoteRequest{RPCHeader: hdr(ld.id, "x"), Term: term + 1, LastLogIndex: 1 << 20, LastLogTerm: term}, &raft.RequestVoteResponse{})
	})
	refusedAs(t, follower, "RequestPreVote from the non-voter n5", RefusedNotVoter, func() error {
		return x.RequestPreVote("", to(follower), &raft.RequestPreVoteRequest{RPCHeader: hdr("n5", "n5"), Term: term + 1, LastLogIndex: 1 << 20, LastLogTerm: term}, &raft.RequestPreVoteResponse{})
	})
	refusedAs(t, follower, "RequestVote from the non-voter n5", RefusedNotVoter, func() error {
		return x.RequestVote("", to(follower), &raft.RequestVoteRequest{RPCHeader: hdr("n5", "n5"), Term: term + 1, LastLogIndex: 1 << 20, LastLogTerm: term}, &raft.RequestVoteResponse{})
	})
	refusedAs(t, follower, "AppendEntries from the leader's ID at another address", RefusedNotMember, func() error {
		return x.AppendEntries("", to(follower), &raft.AppendEntriesRequest{RPCHeader: hdr(ld.id, "x"), Term: term + 1}, &raft.AppendEntriesResponse{})
	})
	refusedAs(t, follower, "TimeoutNow from the leader's ID at another address", RefusedNotLeader, func() error {
		return x.TimeoutNow("", to(follower), &raft.TimeoutNowRequest{RPCHeader: hdr(ld.id, "x")}, &raft.TimeoutNowResponse{})
	})
	refusedAs(t, n5, "TimeoutNow from the leader to a non-voter", RefusedNotLeader, func() error {
		return x.TimeoutNow("", to(n5), &raft.TimeoutNowRequest{RPCHeader: hdr(ld.id, ld.id)}, &raft.TimeoutNowResponse{})
	})
	if s := n5.el.Raft().State(); s != raft.Follower {
		t.Errorf("n5 is %v after a refused TimeoutNow", s)
	}
	refusedAs(t, follower, "a command raft does not know", RefusedUnknownCommand, func() error {
		resp := make(chan raft.RPCResponse, 1)
		if follower.el.admit.admit(raft.RPC{Command: "hello", RespChan: resp}) {
			return nil
		}
		return (<-resp).Error
	})
	// The leader's own TimeoutNow is admitted: a leadership transfer works.
	c.quietly("transfer to "+follower.id, func() error {
		ld, ep := c.leader()
		if ld == follower {
			return nil
		}
		if err := ld.el.TransferTo(ctx, follower.id); err != nil {
			return err
		}
		if nld, nep := c.leaderAbove(ep.Term, ld); nld != follower {
			return fmt.Errorf("%s won term %d, not %s", nld.id, nep.Term, follower.id)
		}
		return nil
	})

	// A node that has no configuration yet (started without Bootstrap, not
	// added): it votes for nobody, and accepts the first leader that
	// appends, whoever claims to be it.
	fresh := c.join("fresh")
	x.Connect(fresh.mem)
	refusedAs(t, fresh, "RequestVote from a member to a node without configuration", RefusedNotVoter, func() error {
		return x.RequestVote("", to(fresh), &raft.RequestVoteRequest{RPCHeader: hdr(ld.id, ld.id), Term: 7, LastLogIndex: 1 << 20, LastLogTerm: 6}, &raft.RequestVoteResponse{})
	})
	refusedAs(t, fresh, "AppendEntries from anyone to a node without configuration", 0, func() error {
		return x.AppendEntries("", to(fresh), &raft.AppendEntriesRequest{RPCHeader: hdr("someone", "x"), Term: 7}, &raft.AppendEntriesResponse{})
	})
	refusedAs(t, fresh, "AppendEntries with term 2^62 to a node without configuration", RefusedTermTooHigh, func() error {
		return x.AppendEntries("", to(fresh), &raft.AppendEntriesRequest{RPCHeader: hdr("someone", "x"), Term: 1 << 62}, &raft.AppendEntriesResponse{})
	})
	if got := fresh.el.Raft().CurrentTerm(); got != 7 {
		t.Errorf("fresh node's term %d after the admitted append of term 7", got)
	}
	// Still without a configuration, it votes for the server that appended
	// to it — the leader it joins may need its vote to win again before the
	// configuration that made it a voter reaches it — and for nobody else.
	refusedAs(t, fresh, "RequestVote from the server that appended, to a node without configuration", 0, func() error {
		return x.RequestVote("", to(fresh), &raft.RequestVoteRequest{RPCHeader: hdr("someone", "x"), Term: 8, LastLogIndex: 1, LastLogTerm: 7}, &raft.RequestVoteResponse{})
	})
	refusedAs(t, fresh, "RequestVote from a member that did not append, to a node without configuration", RefusedNotVoter, func() error {
		return x.RequestVote("", to(fresh), &raft.RequestVoteRequest{RPCHeader: hdr(ld.id, ld.id), Term: 9, LastLogIndex: 1 << 20, LastLogTerm: 8}, &raft.RequestVoteResponse{})
	})
	refusedAs(t, fresh, "RequestPreVote from the appender's ID at another address", RefusedNotVoter, func() error {
		return x.RequestPreVote("", to(fresh), &raft.RequestPreVoteRequest{RPCHeader: hdr("someone", "y"), Term: 9, LastLogIndex: 1 << 20, LastLogTerm: 8}, &raft.RequestPreVoteResponse{})
	})
}
