package election

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
)

// ErrNoSuccessor is returned by Handover when this node stopped leading
// without handing over: it lost contact with a quorum while the handover
// ran (every other voter stopped at once, say), and no voter has taken a
// newer term by the time ctx ends. Nothing was handed over; the cluster has
// no leader until a quorum of voters is back.
var ErrNoSuccessor = errors.New("election: stepped down without a successor")

// Handover hands leadership over and returns the leader that follows this
// node: to the voter with ID id (as TransferTo), or with id "" to a voter
// this leader reaches (as Resign). It waits, within ctx, until this node no
// longer leads and then until it knows the next leader, and returns that
// leader's Leadership (LeaderID, LeaderAddr, LeaderMeta, Term).
//
// It tells apart the ways leadership can end while it waits:
//   - a successor won a newer term: its Leadership, nil;
//   - this node stepped down because it lost its quorum, and no newer term
//     came before ctx ended: ErrNoSuccessor (nothing was handed over);
//   - a newer term began but its leader is not known here before ctx ends:
//     ctx's error.
//
// On a node that is not leader it returns a *NotLeaderError, as TransferTo
// does; id naming this leader asks for nothing and returns this node's own
// Leadership. Other errors are Resign's and TransferTo's: ErrTransfer,
// ErrUnknownServer, ErrClosed.
func (e *Election) Handover(ctx context.Context, id string) (Leadership, error) {
	if e.closed.Load() {
		return Leadership{}, ErrClosed
	}
	if e.raft.State() != raft.Leader {
		return Leadership{}, e.notLeader()
	}
	if id == e.cfg.ID {
		return e.leadership(), nil
	}
	from := e.raft.CurrentTerm()
	var err error
	if id == "" {
		err = e.Resign(ctx)
	} else {
		err = e.TransferTo(ctx, id)
	}
	if err != nil {
		return Leadership{}, err
	}
	return e.successorAfter(ctx, from)
}

// successorAfter waits, within ctx, for a leader of a term after from that
// is not this node, and returns it.
func (e *Election) successorAfter(ctx context.Context, from uint64) (Leadership, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for l := range e.Observe(ctx) {
		if l.Removed {
			return Leadership{}, ErrRemoved
		}
		if l.LeaderID != "" && !l.Self && e.raft.CurrentTerm() > from {
			return l, nil
		}
	}
	if err := ctx.Err(); err != nil {
		if e.raft.CurrentTerm() == from {
			return Leadership{}, fmt.Errorf("%w: no voter took a term after %d (%w)", ErrNoSuccessor, from, err)
		}
		return Leadership{}, err
	}
	return Leadership{}, ErrClosed
}
