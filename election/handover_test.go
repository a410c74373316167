package election

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestHandoverSkipsStoppedVoter: a leader whose first voter in
// configuration order has just stopped hands over to the voter it still
// reaches, and Handover names it. raft's own pick (the first voter with the
// highest next index) is the stopped one when both followers are caught
// up: its transfer cannot finish, and the retries pick it again.
func TestHandoverSkipsStoppedVoter(t *testing.T) {
	c := newCluster(t, 3)
	ld, ep := c.leader()
	var first, live *node
	for _, s := range c.bootstrap() {
		if s.ID == ld.id {
			continue
		}
		if first == nil {
			first = c.byID(s.ID)
		} else {
			live = c.byID(s.ID)
		}
	}
	c.crash(first)
	waitFor(t, "the leader to see "+first.id+" unreachable", func() bool {
		return ld.el.reach.unreachable(raft.ServerID(first.id), time.Now(), 2*ld.el.cfg.HeartbeatTimeout)
	})
	var l Leadership
	c.quietly("a handover to "+live.id, func() error {
		ctx, cancel := context.WithTimeout(t.Context(), waitLong)
		defer cancel()
		var err error
		l, err = ld.el.Handover(ctx, "")
		if errors.As(err, new(*NotLeaderError)) {
			return errSlow // raft deposed it on its own first: try again with the next leader
		}
		return err
	})
	if l.LeaderID != live.id || l.Term <= ep.Term || l.Self {
		t.Fatalf("Handover answered %+v, want %s leading a term after %d", l, live.id, ep.Term)
	}
}

// TestHandoverNoSuccessor: a leader whose every other voter stopped steps
// down for want of a quorum while its handover runs; nothing was handed
// over, and Handover says so (ErrNoSuccessor) instead of "handed over".
func TestHandoverNoSuccessor(t *testing.T) {
	c := newCluster(t, 3)
	ld, ep := c.leader()
	for _, nd := range c.nodes {
		if nd != ld {
			c.crash(nd)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	// End the wait once the leader has stepped down on its own (its lease
	// lapsed): from then on nothing can give it a newer term.
	go func() {
		pollUntil(time.Now().Add(waitLong), func() bool { return ld.el.Raft().State() != raft.Leader })
		cancel()
	}()
	l, err := ld.el.Handover(ctx, "")
	if !errors.Is(err, ErrNoSuccessor) {
		t.Fatalf("Handover = %+v, %v; want ErrNoSuccessor", l, err)
	}
	if term := ld.el.Raft().CurrentTerm(); term != ep.Term {
		t.Fatalf("term moved from %d to %d with every other voter down", ep.Term, term)
	}
}

// TestHandoverToSelfAndFollower: naming the leader itself asks for
// nothing; a follower answers *NotLeaderError naming the leader.
func TestHandoverToSelfAndFollower(t *testing.T) {
	c := newCluster(t, 3)
	ld, ep := c.leader()
	l, err := ld.el.Handover(t.Context(), ld.id)
	if err != nil || !l.Self || l.Term != ep.Term {
		t.Fatalf("Handover to itself = %+v, %v; want its own leadership of term %d", l, err, ep.Term)
	}
	var nl *NotLeaderError
	if _, err := c.other(ld).el.Handover(t.Context(), ""); !errors.As(err, &nl) {
		t.Fatalf("Handover on a follower: %v, want *NotLeaderError", err)
	}
}
