package election

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/transport"
)

// TestRolesTableFitsSnapshot: a role table at its limits — MaxRoles roles
// and MaxRoles removed roles' records, every name and ID at its longest,
// every index at its largest — encodes to a snapshot header below what a
// snapshot's reader accepts. JSON objects grow by the same bytes per entry
// of fixed-length names, so the size at the limit is worked out from two
// smaller tables (encoding 200,000 entries takes most of a minute under
// the race detector), and a table of the smaller size reads back. Seen
// failing with no limit (a table over 64 MiB makes snapshots that cannot
// be restored).
func TestRolesTableFitsSnapshot(t *testing.T) {
	id := strings.Repeat("m", epoch.MaxNameLen)
	nameLen := epoch.MaxNameLen - len("c.") // the longest role of the shortest cluster
	table := func(n int) ([]byte, roleState) {
		st := roleState{Roles: make(map[string]RoleGrant, n), Taken: map[string]uint64{}, Removed: make(map[string]RoleGrant, n), Applied: math.MaxUint64}
		for i := range n {
			st.Roles[fmt.Sprintf("r%0*d", nameLen-1, i)] = RoleGrant{Owner: id, Grant: math.MaxUint64}
			st.Removed[fmt.Sprintf("x%0*d", nameLen-1, i)] = RoleGrant{Prev: id, Grant: math.MaxUint64}
		}
		for i := range 1000 {
			st.Taken[fmt.Sprintf("%s%04d", id[:epoch.MaxNameLen-4], i)] = math.MaxUint64
		}
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		return b, st
	}
	b1, _ := table(1000)
	b2, st2 := table(2000)
	per := len(b2) - len(b1) // bytes per 1,000 roles and 1,000 removed records
	atLimit := len(b1) + per*(MaxRoles-1000)/1000
	t.Logf("role table at its limits: %d bytes (%.1f MiB; the reader accepts %d MiB)", atLimit, float64(atLimit)/(1<<20), maxMetaSnapshot>>20)
	if atLimit > maxMetaSnapshot {
		t.Fatalf("a role table at its limits takes %d bytes, above the %d a snapshot's reader accepts", atLimit, maxMetaSnapshot)
	}
	var buf bytes.Buffer
	buf.Write(binary.AppendUvarint(nil, uint64(len(b2))))
	buf.Write(b2)
	var got roleState
	if err := readSnapshotJSON(bufio.NewReader(&buf), "role table", &got); err != nil {
		t.Fatalf("the snapshot header of a role table does not read back: %v", err)
	}
	if len(got.Roles) != len(st2.Roles) || len(got.Removed) != len(st2.Removed) {
		t.Fatalf("read back %d roles and %d removed, want %d each", len(got.Roles), len(got.Removed), len(st2.Roles))
	}
}

// TestRolesTableBounds: an entry that would add roles beyond MaxRoles adds
// none beyond it (every node applies the same), and removed roles' records
// stay at most MaxRoles, dropping the oldest.
func TestRolesTableBounds(t *testing.T) {
	tb := newRoleTable()
	tb.limit = 100 // MaxRoles, smaller: the rule is the same
	names := make([]string, tb.limit+10)
	for i := range names {
		names[i] = fmt.Sprintf("r%06d", i)
	}
	apply := func(i uint64, ent roleEntry) {
		data, err := json.Marshal(ent)
		if err != nil {
			t.Fatal(err)
		}
		if res := tb.applyRoles(&raft.Log{Index: i, Type: raft.LogCommand, Data: data, Extensions: []byte(rolesExtension)}); res != nil {
			t.Fatalf("apply %d: %v", i, res)
		}
	}
	apply(1, roleEntry{Add: names})
	if n := len(tb.grants()); n != tb.limit {
		t.Fatalf("an Add of %d roles left %d, want the limit (%d)", len(names), n, tb.limit)
	}
	apply(2, roleEntry{Set: map[string]string{names[0]: "a", names[1]: "b"}})
	apply(3, roleEntry{Remove: names[:tb.limit]})
	if n := len(tb.grants()); n != 0 {
		t.Fatalf("%d roles left after removing all", n)
	}
	st := tb.snapshot()
	if len(st.Removed) != 2 {
		t.Fatalf("removed records: %d, want 2 (only roles that had an owner)", len(st.Removed))
	}
	apply(4, roleEntry{Add: names[:1]})
	if g, _ := tb.get(names[0]); g.Owner != "" || g.Prev != "a" || g.Grant != 3 {
		t.Fatalf("re-added %s: %+v, want unowned, previous owner a, grant 3 (its removal)", names[0], g)
	}
	// Records beyond the limit drop the oldest.
	var i uint64 = 5
	for _, r := range names[2:] {
		apply(i, roleEntry{Add: []string{r}})
		apply(i+1, roleEntry{Set: map[string]string{r: "c"}})
		apply(i+2, roleEntry{Remove: []string{r}})
		i += 3
	}
	st = tb.snapshot()
	if len(st.Removed) != tb.limit {
		t.Fatalf("removed records: %d, want the limit %d", len(st.Removed), tb.limit)
	}
	if _, ok := st.Removed[names[1]]; ok {
		t.Errorf("the oldest record (%s) was kept beyond the limit", names[1])
	}
}

// TestRolesNamesCannotCollide: a role's epoch cluster "<Cluster>.<role>"
// names one (cluster, role) and no plain group: role names and group
// cluster names have no '.'. Seen failing with dots allowed ("a" + "b.c"
// and "a.b" + "c" were one epoch cluster, and a group named "a.b" shared
// it too).
func TestRolesNamesCannotCollide(t *testing.T) {
	tr := transport.NewInmem("a")
	defer tr.Close()
	base := Config{ID: "a", Cluster: "a", InMemory: true, Transport: tr}
	for _, tc := range []struct {
		cluster string
		roles   []string
		ok      bool
	}{
		{"a", []string{"b"}, true},
		{"a", []string{"b.c"}, false},
		{"a.b", []string{"c"}, false},
		{"a.b", nil, false},
		{"a", []string{"b_c", "b-c"}, true},
	} {
		cfg := base
		cfg.Cluster, cfg.Roles = tc.cluster, tc.roles
		err := cfg.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("Cluster %q Roles %q: Validate = %v, want ok %v", tc.cluster, tc.roles, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Cluster %q Roles %q: %v does not match ErrInvalidConfig", tc.cluster, tc.roles, err)
		}
	}
	many := base
	many.Roles = roleNames(MaxRoles + 1)
	for i := range many.Roles {
		many.Roles[i] = fmt.Sprintf("r%06d", i)
	}
	if err := many.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Config.Roles of MaxRoles+1: %v, want ErrInvalidConfig", err)
	}
}

// TestRolesAddLimits: AddRoles refuses, with ErrInvalidArgument and nothing
// appended, a role name with a '.', more than 4,096 names in one call, and
// roles beyond the table's limit (MaxRoles; 100 here, so that a loaded
// machine does not spend minutes assigning a full table).
func TestRolesAddLimits(t *testing.T) {
	const limit = 100
	c, _ := newRoleCluster(t, 1, func(_ *node, cfg *Config) {
		cfg.Roles = []string{"r0"}
		cfg.roleLimit = limit
	})
	ld := leaderServing(t, c)
	ctx := context.Background()
	waitFor(t, "r0 in the table", func() bool { _, ok := ld.el.RoleGrants()["r0"]; return ok })
	if err := ld.el.AddRoles(ctx, "b.c"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("AddRoles(b.c): %v, want ErrInvalidArgument", err)
	}
	big := make([]string, maxRolesPerEntry+1)
	for i := range big {
		big[i] = fmt.Sprintf("x%05d", i)
	}
	if err := ld.el.AddRoles(ctx, big...); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("AddRoles of %d names: %v, want ErrInvalidArgument", len(big), err)
	}
	fill := []string{}
	for i := len(ld.el.RoleGrants()); i < limit-1; i++ {
		fill = append(fill, fmt.Sprintf("f%06d", i))
	}
	onServingLeader(t, c, "AddRoles up to the limit less one", func(ld *node) error { return ld.el.AddRoles(ctx, fill...) })
	applied := ld.el.roles.t.applied()
	if err := ld.el.AddRoles(ctx, "y1", "y2"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("AddRoles beyond MaxRoles: %v, want ErrInvalidArgument", err)
	}
	if got := ld.el.roles.t.applied(); got != applied {
		t.Errorf("a refused AddRoles appended an entry (applied %d -> %d)", applied, got)
	}
	onServingLeader(t, c, "AddRoles(y1)", func(ld *node) error { return ld.el.AddRoles(ctx, "y1") })
	if n := len(ld.el.RoleGrants()); n != limit {
		t.Errorf("table holds %d roles, want the limit (%d)", n, limit)
	}
}

// TestRolesReaddWaitsForPreviousOwner: a role removed from a holder that is
// cut off (its lease still holds) and added again at once is not given to
// anyone before that holder's lease has lapsed: the role checker sees no
// two holders. Seen failing with removal forgetting the previous owner
// (the re-added role was granted at once, 3 of 3).
func TestRolesReaddWaitsForPreviousOwner(t *testing.T) {
	roles := roleNames(6)
	c, _ := newRoleCluster(t, 3, withRoles(roles, 20*testHT)) // a lease far above the remove and add
	all := ids(c)
	owners := settled(t, c, roles, all...)
	v := victimWithRoles(t, c, owners, false)
	held := v.el.HeldRoles()
	r := held[0]
	v.net.Isolate()
	ctx := context.Background()
	ld := onServingLeader(t, c, "RemoveRoles "+r, func(ld *node) error { return ld.el.RemoveRoles(ctx, r) })
	onServingLeader(t, c, "AddRoles "+r, func(ld *node) error { return ld.el.AddRoles(ctx, r) })
	if g := ld.el.RoleGrants()[r]; g.Owner == "" && g.Prev != v.id {
		t.Errorf("re-added %s: %+v, want it to wait for %s", r, g, v.id)
	}
	settled(t, c, roles, without(all, v.id)...)
	if h := v.el.HeldRoles(); len(h) != 0 {
		t.Errorf("isolated %s still holds %v after its roles moved", v.id, h)
	}
	v.net.Heal()
	settled(t, c, roles, all...)
	// The cleanup's role check fails the test on any overlap.
}
