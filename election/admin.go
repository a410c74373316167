package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/epoch"
)

// The methods in this file wrap hashicorp/raft futures. Each waits for its
// future or for ctx, whichever comes first. Cancelling ctx stops the wait,
// not the operation: a configuration change or leadership transfer already
// handed to raft may still complete after the method returned ctx.Err().

// Resign hands leadership to another voter (raft's leadership transfer: the
// most up-to-date follower wins term+1 without waiting for a timeout) and
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
	return e.transfer(ctx, func() raft.Future { return e.raft.LeadershipTransfer() })
}

// TransferTo hands leadership to the voter with this ID, which wins term+1,
// and waits until this node is no longer leader. It fails with a
// *NotLeaderError on a node that is not leader and with ErrUnknownServer for
// an ID that is not another voter. Failed attempts are retried as in Resign.
func (e *Election) TransferTo(ctx context.Context, id string) error {
	if e.closed.Load() {
		return ErrClosed
	}
	if id == e.cfg.ID {
		return fmt.Errorf("%w: %s is this node", ErrUnknownServer, id)
	}
	if e.raft.State() != raft.Leader {
		return e.notLeader()
	}
	addr, ok := e.voterAddr(id)
	if !ok {
		return fmt.Errorf("%w: %s is not a voter", ErrUnknownServer, id)
	}
	return e.transfer(ctx, func() raft.Future {
		return e.raft.LeadershipTransferToServer(raft.ServerID(id), raft.ServerAddress(addr))
	})
}

// transfer issues leadership transfers until one works or this node is no
// longer leader, then waits until raft no longer reports it as Leader.
func (e *Election) transfer(ctx context.Context, issue func() raft.Future) error {
	for {
		err := e.await(ctx, issue)
		switch {
		case err == nil, e.raft.State() != raft.Leader:
			return e.waitNotLeader(ctx)
		case errors.Is(err, ErrClosed), ctx.Err() != nil:
			return err
		case errors.Is(err, raft.ErrNotLeader):
			return e.notLeader()
		}
		e.log.Debug("leadership transfer attempt failed, retrying", "error", err)
		t := time.NewTimer(e.retryInterval())
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: %w (last attempt: %v)", ErrTransfer, ctx.Err(), err)
		}
	}
}

// waitNotLeader blocks until raft no longer reports this node as Leader.
func (e *Election) waitNotLeader(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range e.Observe(ctx) { // a value after every leadership change
		if e.raft.State() != raft.Leader {
			return nil
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return ErrClosed
}

// AddVoter adds (or updates) a voting member with this Raft ID and transport
// address, waiting until the configuration change is committed. On a node
// that is not leader it returns a *NotLeaderError naming the leader, so the
// caller can forward the request there. ErrInvalidArgument: id or addr
// unusable.
func (e *Election) AddVoter(ctx context.Context, id, addr string) error {
	if e.closed.Load() {
		return ErrClosed
	}
	if err := epoch.ValidateName(id); err != nil {
		return fmt.Errorf("%w: ID: %v", ErrInvalidArgument, err)
	}
	if addr == "" {
		return fmt.Errorf("%w: %s has no address", ErrInvalidArgument, id)
	}
	if e.raft.State() != raft.Leader {
		return e.notLeader()
	}
	err := e.await(ctx, func() raft.Future {
		return e.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, 0)
	})
	return e.configErr("add voter "+id, err)
}

// RemoveServer removes the member with this Raft ID, waiting until the
// configuration change is committed. Removing the leader itself makes it
// step down once the change commits. On a node that is not leader it returns
// a *NotLeaderError naming the leader.
func (e *Election) RemoveServer(ctx context.Context, id string) error {
	if e.closed.Load() {
		return ErrClosed
	}
	if err := epoch.ValidateName(id); err != nil {
		return fmt.Errorf("%w: ID: %v", ErrInvalidArgument, err)
	}
	if e.raft.State() != raft.Leader {
		return e.notLeader()
	}
	err := e.await(ctx, func() raft.Future {
		return e.raft.RemoveServer(raft.ServerID(id), 0, 0)
	})
	return e.configErr("remove server "+id, err)
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

// await issues a raft future (unless Close has begun) and waits for it or
// for ctx.
func (e *Election) await(ctx context.Context, issue func() raft.Future) error {
	if err := ctx.Err(); err != nil {
		return err // nothing issued
	}
	e.opMu.RLock()
	if e.closed.Load() {
		e.opMu.RUnlock()
		return ErrClosed
	}
	done := e.awaitAsync(issue())
	e.opMu.RUnlock()
	select {
	case err := <-done:
		if errors.Is(err, raft.ErrRaftShutdown) && e.closed.Load() {
			return ErrClosed
		}
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
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
