package election

import (
	"encoding/json"
	"fmt"
	"maps"
	"sync"

	"github.com/hashicorp/raft"
)

// The role table travels in the Raft log like member metadata (meta.go):
// entries this package writes itself, marked in raft.Log.Extensions, kept
// from the application's FSM, and carried in snapshots in the header in
// front of the application's own snapshot. The protocol is in
// docs/DESIGN.md, "Roles: many owners on one group".

// rolesExtension marks the log entries that change the role table.
const rolesExtension = "termfence/roles/1"

// maxRolesPerEntry bounds the roles one entry changes: the assigner splits
// a larger pass into several entries.
const maxRolesPerEntry = 4096

// RoleGrant is one role's assignment as a node applied it.
type RoleGrant struct {
	// Owner is the member ID the role is granted to; empty while the role
	// is unassigned (new, or revoked for a handover).
	Owner string `json:"o,omitempty"`
	// Grant is the log index of the entry that last changed the role's
	// owner: the Term of the owner's role epoch.
	Grant uint64 `json:"g,omitempty"`
	// Prev is the owner a revoke took the role from (only while Owner is
	// empty): the role goes to someone else only once Prev has applied the
	// revoke or its lease has lapsed.
	Prev string `json:"p,omitempty"`
}

// roleEntry is one role log entry. It is applied in this order: Add, Set,
// Remove.
type roleEntry struct {
	Add    []string          `json:"add,omitempty"`
	Set    map[string]string `json:"set,omitempty"` // role -> new owner ("" revokes)
	Remove []string          `json:"remove,omitempty"`
}

// roleState is the replicated part: what the snapshot carries.
type roleState struct {
	Roles map[string]RoleGrant `json:"roles"`
	// Taken is, per member, the index of the latest entry that took a role
	// away from it (R5: no renewal until the member applied it).
	Taken map[string]uint64 `json:"taken"`
	// Applied is the index of the latest role entry applied.
	Applied uint64 `json:"applied"`
	// Removed keeps, per removed role, whom it was taken from and by
	// which entry (Prev and Grant, no Owner): a role added again starts
	// from it, so the assigner waits for that previous owner as after a
	// revoke. At most MaxRoles; beyond, the oldest record goes.
	Removed map[string]RoleGrant `json:"removed,omitempty"`
}

// roleTable is the replicated role table of one node.
type roleTable struct {
	mu sync.RWMutex
	st roleState
	// ch is closed (and replaced) on every change: a broadcast that costs
	// the same however many roles or waiters there are.
	ch chan struct{}
	// ver counts the changes (every broadcast): a reader that sees the
	// same ver before and after reading something else knew the table
	// unchanged in between (roleHold).
	ver uint64
	// limit is MaxRoles (tests set less): the most roles, and the most
	// removed roles' records, the table keeps.
	limit int
	// onApply is called after every applied entry, without the lock.
	onApply func(index uint64, ent *roleEntry)
}

func newRoleTable() *roleTable {
	return &roleTable{
		st:    roleState{Roles: make(map[string]RoleGrant), Taken: make(map[string]uint64), Removed: make(map[string]RoleGrant)},
		ch:    make(chan struct{}),
		limit: MaxRoles,
	}
}

// changed returns a channel closed at the table's next change (or the
// member's lease change: see roles.broadcast).
func (t *roleTable) changed() <-chan struct{} {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.ch
}

// broadcastLocked wakes every waiter on changed. Call with mu held.
func (t *roleTable) broadcastLocked() {
	t.ver++
	close(t.ch)
	t.ch = make(chan struct{})
}

func (t *roleTable) broadcast() {
	t.mu.Lock()
	t.broadcastLocked()
	t.mu.Unlock()
}

func (t *roleTable) get(role string) (RoleGrant, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	g, ok := t.st.Roles[role]
	return g, ok
}

// getVer returns role's grant with the table's change count.
func (t *roleTable) getVer(role string) (RoleGrant, bool, uint64) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	g, ok := t.st.Roles[role]
	return g, ok, t.ver
}

func (t *roleTable) version() uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.ver
}

func (t *roleTable) empty() bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.st.Roles) == 0
}

func (t *roleTable) applied() uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.st.Applied
}

func (t *roleTable) taken(id string) uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.st.Taken[id]
}

func (t *roleTable) grants() map[string]RoleGrant {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return maps.Clone(t.st.Roles)
}

func (t *roleTable) owners() map[string]string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	m := make(map[string]string, len(t.st.Roles))
	for r, g := range t.st.Roles {
		m[r] = g.Owner
	}
	return m
}

func (t *roleTable) snapshot() roleState {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return roleState{Roles: maps.Clone(t.st.Roles), Taken: maps.Clone(t.st.Taken), Applied: t.st.Applied, Removed: maps.Clone(t.st.Removed)}
}

func (t *roleTable) restore(st roleState) {
	if st.Roles == nil {
		st.Roles = make(map[string]RoleGrant)
	}
	if st.Taken == nil {
		st.Taken = make(map[string]uint64)
	}
	if st.Removed == nil {
		st.Removed = make(map[string]RoleGrant)
	}
	t.mu.Lock()
	t.st = st
	t.broadcastLocked()
	t.mu.Unlock()
	if t.onApply != nil {
		t.onApply(st.Applied, nil)
	}
}

// keepRemovedLocked records a removed role's previous owner, dropping the
// oldest record (lowest Grant, then name: the same on every node) if the
// records would exceed the limit.
func (t *roleTable) keepRemovedLocked(r string, g RoleGrant) {
	if _, ok := t.st.Removed[r]; !ok && len(t.st.Removed) >= t.limit {
		oldest, og := "", RoleGrant{}
		for name, rg := range t.st.Removed {
			if oldest == "" || rg.Grant < og.Grant || (rg.Grant == og.Grant && name < oldest) {
				oldest, og = name, rg
			}
		}
		delete(t.st.Removed, oldest)
	}
	t.st.Removed[r] = g
}

// countWith returns how many roles the table would hold with names added,
// how many of names are new, and the table's limit.
func (t *roleTable) countWith(names []string) (n, add, limit int) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	seen := make(map[string]bool, len(names))
	for _, r := range names {
		if _, ok := t.st.Roles[r]; !ok && !seen[r] {
			seen[r] = true
			add++
		}
	}
	return len(t.st.Roles) + add, add, t.limit
}

// isRoles reports whether l is a role entry of this package.
func isRoles(l *raft.Log) bool {
	return l.Type == raft.LogCommand && string(l.Extensions) == rolesExtension
}

// applyRoles applies a role entry. A malformed one (which only another
// version could write) changes nothing: stopping the FSM would stop the
// node. Roles it names that do not exist are skipped (Set, Remove), as are
// Adds of roles that exist.
func (t *roleTable) applyRoles(l *raft.Log) any {
	var ent roleEntry
	if err := json.Unmarshal(l.Data, &ent); err != nil {
		return fmt.Errorf("election: log entry %d: malformed role entry", l.Index)
	}
	i := l.Index
	t.mu.Lock()
	if i <= t.st.Applied {
		t.mu.Unlock()
		return nil // already in the restored snapshot
	}
	for _, r := range ent.Add {
		if _, ok := t.st.Roles[r]; !ok && validRoleName(r) == nil && len(t.st.Roles) < t.limit {
			t.st.Roles[r] = t.st.Removed[r] // a removed role's previous owner, if any
			delete(t.st.Removed, r)
		}
	}
	for r, owner := range ent.Set {
		g, ok := t.st.Roles[r]
		if !ok {
			continue
		}
		if g.Owner != "" && g.Owner != owner {
			t.st.Taken[g.Owner] = i
		}
		ng := RoleGrant{Owner: owner, Grant: i}
		if owner == "" {
			ng.Prev = g.Owner
			if ng.Prev == "" {
				ng.Prev = g.Prev // revoking an unowned role keeps whom to wait for
			}
		}
		t.st.Roles[r] = ng
	}
	for _, r := range ent.Remove {
		g, ok := t.st.Roles[r]
		if !ok {
			continue
		}
		if g.Owner != "" {
			t.st.Taken[g.Owner] = i
		}
		delete(t.st.Roles, r)
		switch {
		case g.Owner != "":
			t.keepRemovedLocked(r, RoleGrant{Prev: g.Owner, Grant: i})
		case g.Prev != "":
			t.keepRemovedLocked(r, RoleGrant{Prev: g.Prev, Grant: g.Grant}) // revoked, not yet given out
		}
	}
	t.st.Applied = i
	t.broadcastLocked()
	t.mu.Unlock()
	if t.onApply != nil {
		t.onApply(i, &ent)
	}
	return nil
}
