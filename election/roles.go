package election

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/termfence/termfence/epoch"
)

// Roles: one group, many owners. The group's leader assigns each named role
// to one member; the log index of the assignment is the role's epoch. The
// protocol and its invariants (R1-R7) are in docs/DESIGN.md, "Roles: many
// owners on one group"; this file is the public API, rolestable.go the
// replicated table, roleslease.go the member's lease and the leader's
// renewal service, rolesassign.go the leader's assigner.

var (
	// ErrUnknownRole is matched by the *RoleError of RoleEpoch, RoleToken
	// and MoveRole for a role that is not in the role table as this node
	// applied it.
	ErrUnknownRole = errors.New("election: unknown role")

	// ErrNoRoleLease is matched by the *RoleError of RoleEpoch and
	// RoleToken when the role is granted to this node but its role lease
	// has lapsed (it has not been renewed by a leader within RoleLease):
	// the role is about to move, or comes back with the next renewal.
	ErrNoRoleLease = errors.New("election: role lease lapsed")
)

// RoleError is the error of RoleEpoch and RoleToken when this node does not
// hold the role now. It matches ErrNotLeader; also ErrUnknownRole or
// ErrNoRoleLease when those are the reason.
type RoleError struct {
	Role  string
	Owner string // the owner in this node's role table; empty: none
	// Unknown: the role is not in the table. NoLease: the role is granted
	// to this node but its lease has lapsed.
	Unknown, NoLease bool
}

// Error implements error.
func (e *RoleError) Error() string {
	switch {
	case e.Unknown:
		return fmt.Sprintf("election: role %q is not in the role table", e.Role)
	case e.NoLease:
		return fmt.Sprintf("election: role %q: this node's role lease has lapsed", e.Role)
	case e.Owner == "":
		return fmt.Sprintf("election: role %q is not held (unassigned)", e.Role)
	}
	return fmt.Sprintf("election: role %q is held by %s", e.Role, e.Owner)
}

// Is matches ErrNotLeader, and ErrUnknownRole or ErrNoRoleLease.
func (e *RoleError) Is(target error) bool {
	return target == ErrNotLeader || (target == ErrUnknownRole && e.Unknown) || (target == ErrNoRoleLease && e.NoLease)
}

// MaxRoles bounds the role table: AddRoles and Config.Roles refuse more,
// and an entry that would add more adds none beyond it. With names and IDs
// at their longest a role takes at most about 240 bytes of a snapshot's
// header, and a removed role's record (kept so that a re-added role waits
// for its previous owner) as much again: the header stays far below the
// 64 MiB a snapshot's reader accepts (TestRolesTableFitsSnapshot).
const MaxRoles = 100_000

// validRoleName checks a role name: the charset of IDs without '.', so
// that "<cluster>.<role>" names exactly one (cluster, role) — "a" + "b.c"
// and "a.b" + "c" would otherwise be one epoch cluster — and none names a
// plain group (Config.Cluster has no '.'). The length with the actual
// cluster is checked in Config.Validate and checkRole.
func validRoleName(r string) error {
	if err := epoch.ValidateName(r); err != nil {
		return err
	}
	if strings.Contains(r, ".") {
		return errors.New("name has a '.': a role's epoch cluster is \"<cluster>.<role>\" with exactly one dot")
	}
	return nil
}

// roleCluster is the epoch Cluster of role r.
func (e *Election) roleCluster(r string) string { return e.cfg.Cluster + "." + r }

func (e *Election) checkRole(r string) error {
	if err := validRoleName(r); err != nil {
		return fmt.Errorf("%w: role %q: %v", ErrInvalidArgument, r, err)
	}
	if err := epoch.ValidateName(e.roleCluster(r)); err != nil {
		return fmt.Errorf("%w: role %q: its epoch cluster name %q: %v", ErrInvalidArgument, r, e.roleCluster(r), err)
	}
	return nil
}

// RoleEpoch returns this node's epoch for role r — Epoch{Cluster:
// "<Cluster>.<r>", Term: <log index of the grant>, Leader: <this node's ID>}
// — if this node holds r at the moment of the call: its applied role table
// grants r to it, and its role lease holds (invariants R2 and R3 in
// docs/DESIGN.md), both true at one instant. Otherwise the error is a
// *RoleError (matching ErrNotLeader), or ErrClosed.
//
// As with Epoch, a successful result is a statement about the instant of the
// call; present it to a fence that keeps the highest epoch of r's resource.
func (e *Election) RoleEpoch(r string) (epoch.Epoch, error) {
	ep, _, err := e.roleHold(r)
	return ep, err
}

// roleHold is RoleEpoch with the lease's hold count (leaseState.gen). The
// grant and the lease are one decision: the table's change count is read
// with the grant and again after the lease, and if anything was applied in
// between the decision is taken again under the table's lock. So a
// successful result means that at the moment the lease was read the table
// still granted r to this node with that grant.
func (e *Election) roleHold(r string) (epoch.Epoch, uint64, error) {
	if e.closed.Load() {
		return epoch.Epoch{}, 0, ErrClosed
	}
	rs := e.roles
	decide := func(g RoleGrant, ok bool, gen uint64, holds bool) (epoch.Epoch, uint64, error) {
		switch {
		case !ok:
			return epoch.Epoch{}, 0, &RoleError{Role: r, Unknown: true}
		case g.Owner != e.cfg.ID || g.Grant == 0:
			return epoch.Epoch{}, 0, &RoleError{Role: r, Owner: g.Owner}
		case !holds:
			return epoch.Epoch{}, 0, &RoleError{Role: r, Owner: g.Owner, NoLease: true}
		}
		return epoch.Epoch{Cluster: e.roleCluster(r), Term: g.Grant, Leader: e.cfg.ID}, gen, nil
	}
	g, ok, v := rs.t.getVer(r)
	if h := rs.epochHook.Load(); h != nil {
		(*h)()
	}
	gen, holds := rs.leaseNow()
	if rs.t.version() == v {
		return decide(g, ok, gen, holds)
	}
	rs.t.mu.RLock()
	defer rs.t.mu.RUnlock()
	g, ok = rs.t.st.Roles[r]
	gen, holds = rs.leaseNow()
	return decide(g, ok, gen, holds)
}

// RoleToken returns RoleEpoch(r) signed with Config.Signer.
func (e *Election) RoleToken(r string) (string, error) {
	ep, err := e.RoleEpoch(r)
	if err != nil {
		return "", err
	}
	return e.cfg.Signer.Sign(ep)
}

// RoleOwners returns role -> owner ID as this node last applied the role
// table (an unassigned role maps to ""). It says who was granted each role,
// not who holds it now: an owner whose lease lapsed has stopped.
func (e *Election) RoleOwners() map[string]string { return e.roles.t.owners() }

// RoleGrants returns every role's grant as this node last applied it.
func (e *Election) RoleGrants() map[string]RoleGrant { return e.roles.t.grants() }

// HeldRoles returns the roles this node holds now (RoleEpoch would succeed),
// sorted.
func (e *Election) HeldRoles() []string {
	if e.closed.Load() {
		return nil
	}
	t := e.roles.t
	var held []string
	t.mu.RLock()
	if e.roles.leaseHolds() {
		for r, g := range t.st.Roles {
			if g.Owner == e.cfg.ID && g.Grant != 0 {
				held = append(held, r)
			}
		}
	}
	t.mu.RUnlock()
	slices.Sort(held)
	return held
}

// ObserveRoles returns a channel that first receives the role table as this
// node applied it (RoleGrants) and then the table after every change to it
// or to this node's role lease. A slow reader may miss intermediate values
// but always ends up with the latest; the channel is closed when ctx ends
// or the Election closes. One goroutine serves each call.
func (e *Election) ObserveRoles(ctx context.Context) <-chan map[string]RoleGrant {
	out := make(chan map[string]RoleGrant, 1)
	if e.closed.Load() {
		close(out)
		return out
	}
	go func() {
		defer close(out)
		for {
			ch := e.roles.t.changed()
			cur := e.roles.t.grants()
			select {
			case <-out: // replace an unread, older value
			default:
			}
			out <- cur
			select {
			case <-ch:
			case <-ctx.Done():
				return
			case <-e.stop:
				return
			}
		}
	}()
	return out
}

// LeadRole runs fn whenever this node holds role r, and blocks until ctx
// ends (it then returns ctx.Err()) or the Election closes (ErrClosed).
//
// A hold is an unbroken stretch of time in which RoleEpoch(r) succeeds with
// one grant: it begins when this node applies a grant of r to itself while
// its role lease holds, or when its lease is renewed after it had lapsed
// (the same grant held again: a leader change can leave the grant where it
// was while every lease lapsed during the election), and it ends when this
// node applies a later entry for r (the role moved, was revoked for a
// handover, or was removed) or its lease lapses. fn runs once for each
// hold, with r's epoch, under a context that is cancelled when the hold
// ends — at the latest when this node's clock passes the lease's end, on a
// timer of its own — or when ctx ends or the Election closes. Calls never
// overlap: a hold that begins while fn still runs for an earlier one gets
// its call once fn has returned, if it still lasts. If fn returns while its
// hold lasts, it is not called again before the next hold.
//
// So after faults end, every role with a live owner has its fn running
// within the time the group takes to renew that owner (docs/DESIGN.md,
// "Liveness"). As for Lead, the cancellation is a best-effort notice: send
// the role epoch (or RoleToken) with every write to r's resource and treat
// the fence's refusal as "you no longer hold r".
func (e *Election) LeadRole(ctx context.Context, r string, fn func(ctx context.Context, ep epoch.Epoch) error) error {
	if e.closed.Load() {
		return ErrClosed
	}
	if fn == nil {
		return fmt.Errorf("%w: LeadRole needs a non-nil fn", ErrInvalidArgument)
	}
	if err := e.checkRole(r); err != nil {
		return err
	}
	var last epoch.Epoch
	var lastGen uint64
	for {
		ch := e.roles.t.changed()
		if ep, gen, err := e.roleHold(r); err == nil && (ep != last || gen != lastGen) {
			last, lastGen = ep, gen
			e.runRole(ctx, r, ep, gen, fn)
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-e.stop:
			return ErrClosed
		}
	}
}

// runRole runs fn for one hold under a context cancelled when the hold
// ends.
func (e *Election) runRole(ctx context.Context, r string, ep epoch.Epoch, gen uint64, fn func(context.Context, epoch.Epoch) error) {
	lctx, cancel := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		defer cancel()
		for {
			ch := e.roles.t.changed()
			if cur, g, err := e.roleHold(r); err != nil || cur != ep || g != gen {
				return
			}
			select {
			case <-ch:
			case <-lctx.Done():
				return
			case <-e.stop:
				return
			}
		}
	}()
	err := fn(lctx, ep)
	cancel()
	<-watched
	if err != nil {
		e.log.Info("lead role: fn returned an error", "role", r, "grant", ep.Term, "error", err)
	}
}

// AddRoles adds roles to the group's role table, unassigned; the leader's
// assigner gives them out. It needs this node to lead (ErrNotLeader
// otherwise, naming the leader) and returns once the entry is committed
// and applied here. Roles that exist already are left as they are. A role
// that was removed and is added again goes to a new owner only once its
// previous owner applied the removal or its lease lapsed. At most
// 4,096 names per call, and the table holds at most MaxRoles
// (ErrInvalidArgument beyond either).
func (e *Election) AddRoles(ctx context.Context, names ...string) error {
	if len(names) > maxRolesPerEntry {
		return fmt.Errorf("%w: AddRoles of %d roles: at most %d in one call", ErrInvalidArgument, len(names), maxRolesPerEntry)
	}
	for _, r := range names {
		if err := e.checkRole(r); err != nil {
			return err
		}
	}
	if n, add, limit := e.roles.t.countWith(names); n > limit {
		return fmt.Errorf("%w: AddRoles of %d new roles: the role table would hold %d, above MaxRoles (%d)", ErrInvalidArgument, add, n, limit)
	}
	return e.roles.leaderApply(ctx, &roleEntry{Add: slices.Clone(names)}, nil, nil)
}

// RemoveRoles deletes roles from the table: their owners stop holding them
// when they apply the entry (or their lease lapses). It needs this node to
// lead. Unknown names are ignored.
func (e *Election) RemoveRoles(ctx context.Context, names ...string) error {
	for _, r := range names {
		if err := e.checkRole(r); err != nil {
			return err
		}
	}
	var from []string
	for _, r := range names {
		if g, ok := e.roles.t.get(r); ok && g.Owner != "" {
			from = append(from, g.Owner)
		}
	}
	return e.roles.leaderApply(ctx, &roleEntry{Remove: slices.Clone(names)}, from, nil)
}

// MoveRole hands role r over to member to: the leader revokes r (its owner
// stops when it applies the revoke), and grants it to to as soon as the
// old owner reported that it applied the revoke, or its lease lapsed. It
// returns when the revoke is committed; watch RoleOwners (or ObserveRoles)
// for the grant. It needs this node to lead. The balance rule may later
// move another role off to.
func (e *Election) MoveRole(ctx context.Context, r, to string) error {
	if err := e.checkRole(r); err != nil {
		return err
	}
	if err := epoch.ValidateName(to); err != nil {
		return fmt.Errorf("%w: member %q: %v", ErrInvalidArgument, to, err)
	}
	g, ok := e.roles.t.get(r)
	if !ok {
		return &RoleError{Role: r, Unknown: true}
	}
	if g.Owner == to {
		return nil
	}
	e.roles.setPrefer(r, to)
	var from []string
	if g.Owner != "" {
		from = []string{g.Owner}
	}
	undo := func() { // the revoke failed: forget the target (under rs.mu)
		if e.roles.ls.prefer != nil && e.roles.ls.prefer[r] == to {
			delete(e.roles.ls.prefer, r)
		}
	}
	return e.roles.leaderApply(ctx, &roleEntry{Set: map[string]string{r: ""}}, from, undo)
}

// roleLeaseDefault is RoleLease when Config.RoleLease is zero.
func roleLeaseDefault(ht time.Duration) time.Duration { return 2 * ht }

// monoClock is the default role clock: the process's monotonic clock.
func monoClock() func() time.Duration {
	base := time.Now()
	return func() time.Duration { return time.Since(base) }
}
