package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// The methods in this file start hashicorp/raft operations and wait for
// their outcome or for ctx, whichever comes first. Cancelling ctx stops the
// wait, not the operation: a configuration change or leadership transfer
// already handed to raft may still complete after the method returned.

// Resign hands leadership to another voter (raft's leadership transfer to a
// voter this leader's heartbeats reach: it wins term+1 without waiting for
// a timeout) and
// waits until this node is no longer leader. On a node that is not leader it
// does nothing and returns nil. With no other voter it fails at once with
// ErrTransfer. A transfer attempt that fails (raft gives each one
// ElectionTimeout; a follower that is catching up can miss it) is retried
// until this node is no longer leader or ctx ends; the error then wraps both
// ErrTransfer and ctx's error.
func (e *Election) Resign(ctx context.Context) error {
	if e.closed.Load() {
		return ErrClosed
	}
	if e.raft.State() != raft.Leader {
		return nil
	}
	if !e.hasOtherVoter() {
		return fmt.Errorf("%w: no other voter to hand over to", ErrTransfer)
	}
	return e.transfer(ctx, e.transferToSuccessor)
}

// TransferTo hands leadership to the voter with this ID, which wins term+1,
// and waits until this node is no longer leader. It fails with a
// *NotLeaderError on a node that is not leader (also when id is this node's:
// the leader can hand over to it) and with ErrUnknownServer for an ID that
// is not a voter. On the leader, its own ID asks for nothing: TransferTo
// returns nil at once. Failed attempts are retried as in Resign.
func (e *Election) TransferTo(ctx context.Context, id string) error {
	if e.closed.Load() {
		return ErrClosed
	}
	if e.raft.State() != raft.Leader {
		return e.notLeader()
	}
	if id == e.cfg.ID {
		return nil // already leads
	}
	addr, ok := e.voterAddr(id)
	if !ok {
		return fmt.Errorf("%w: %s is not a voter", ErrUnknownServer, id)
	}
	return e.transfer(ctx, func() raft.Future {
		return e.raft.LeadershipTransferToServer(raft.ServerID(id), raft.ServerAddress(addr))
	})
}

// transfer starts leadership transfers until this node is no longer
// leader, ctx ends or the Election closes. Each attempt gets
// ElectionTimeout (raft's own limit for one transfer) before the next.
//
// The transfer futures are not waited on: the outcome is watched through
// raft's state instead. raft answers a transfer future only while it runs —
// one still queued inside raft when it shuts down is never answered — so a
// goroutine blocked on it could outlive Close.
func (e *Election) transfer(ctx context.Context, issue func() raft.Future) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	updates := e.Observe(ctx) // a value after every leadership change
	next := time.NewTimer(0)
	defer next.Stop()
	attempts := 0
	for {
		if e.raft.State() != raft.Leader {
			return nil
		}
		select {
		case <-next.C:
			if e.closed.Load() {
				return ErrClosed
			}
			if attempts > 0 {
				e.log.Debug("leadership transfer did not complete, retrying", "attempts", attempts)
			}
			_ = issue()
			attempts++
			next.Reset(e.cfg.ElectionTimeout + e.retryInterval())
		case _, ok := <-updates:
			if !ok {
				if ctx.Err() == nil {
					return ErrClosed
				}
				updates = nil // ctx ended: the next case returns
			}
		case <-ctx.Done():
			return fmt.Errorf("%w: %w (still leader after %d attempts)", ErrTransfer, ctx.Err(), attempts)
		}
	}
}

func (e *Election) configErr(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost):
		return e.notLeader()
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrClosed
	case errors.Is(err, ErrClosed), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	return fmt.Errorf("election: %s: %w", op, err)
}

// await waits for a raft future, for ctx, or for Close (see wait).
func (e *Election) await(ctx context.Context, issue func() raft.Future) error {
	if err := ctx.Err(); err != nil {
		return err // nothing issued
	}
	if e.closed.Load() {
		return ErrClosed
	}
	err := e.wait(ctx, issue())
	if errors.Is(err, raft.ErrRaftShutdown) && e.closed.Load() {
		return ErrClosed
	}
	return err
}

// voterAddr returns the address of the voter with this ID.
func (e *Election) voterAddr(id string) (string, bool) {
	f := e.raft.GetConfiguration()
	if f.Error() != nil {
		return "", false
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == id && s.Suffrage == raft.Voter {
			return string(s.Address), true
		}
	}
	return "", false
}
