package election

import (
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"log/slog"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/transport"
)

// Defaults for zero timeouts: hashicorp/raft's own defaults.
const (
	DefaultHeartbeatTimeout   = 1000 * time.Millisecond
	DefaultElectionTimeout    = 1000 * time.Millisecond
	DefaultLeaderLeaseTimeout = 500 * time.Millisecond

	// MinTimeout is the smallest timeout hashicorp/raft accepts.
	MinTimeout = 5 * time.Millisecond
)

// Server is one voter of the cluster: its Raft server ID and the transport
// address its peers reach it at.
type Server struct {
	ID   string
	Addr string
}

// Config configures New. It is passed by value; New and Validate never modify
// it, and zero fields take the documented defaults in a private copy.
type Config struct {
	// ID is this node's Raft server ID, which becomes Epoch.Leader when it
	// leads. Required; 1..64 bytes of [A-Za-z0-9._-] (epoch.ValidateName). A
	// node whose DataDir was wiped must rejoin under a new ID.
	ID string

	// Cluster names the election group; it becomes Epoch.Cluster. Required,
	// same charset as ID but without '.': a dot is reserved for role epochs,
	// whose Cluster is "<Cluster>.<role>", so that no role's epoch can name
	// another group or another group's role. Every node of a cluster must
	// use the same value.
	Cluster string

	// DataDir holds the durable Raft state: raft.db (raft-boltdb, fsynced on
	// every write, so terms survive crashes) and snapshots/. Created if
	// missing. Required unless InMemory. Only one Election may use a DataDir
	// at a time; a second one fails fast with ErrDataDirLocked.
	DataDir string

	// InMemory keeps all Raft state in memory and ignores DataDir. A node
	// that restarts then forgets its term and vote, which can elect two
	// leaders for one term: for tests and demos only.
	InMemory bool

	// Transport carries Raft's RPCs; build it with package transport
	// (NewTCP, or NewInmem for tests). Required. On success New takes
	// ownership: Close closes it. If New fails, the caller still owns it.
	Transport transport.Transport

	// Bootstrap is the configuration of a brand-new cluster: give every
	// initial voter the same list (including this node), or give only one
	// node a list with itself and AddVoter the others. It is applied only
	// when DataDir holds no Raft state yet, so restarting a node with the
	// same Config is safe. Empty: join an existing cluster (or restart).
	Bootstrap []Server

	// HeartbeatTimeout is how long a follower goes without hearing from the
	// leader before it starts an election. raft alone notices a dead leader
	// between one and three of these after the last contact; an Election
	// wakes raft at about one (docs/PERFORMANCE.md), which needs
	// LeaderLeaseTimeout below HeartbeatTimeout. Zero means
	// DefaultHeartbeatTimeout (1 s). At least MinTimeout; at least
	// LeaderLeaseTimeout and at most ElectionTimeout.
	HeartbeatTimeout time.Duration

	// ElectionTimeout is how long a candidate waits for an election to
	// complete before starting another; it also bounds Close's handover.
	// Zero means DefaultElectionTimeout (1 s). At least HeartbeatTimeout.
	ElectionTimeout time.Duration

	// LeaderLeaseTimeout is how long a leader keeps leading without hearing
	// from a quorum; after that it steps down and its Epoch stops at once.
	// Keep it comfortably above one fsync, since heartbeats wait behind
	// disk writes on Raft's main goroutine (invariant I2 in docs/DESIGN.md,
	// transport.MainLoopOnly). Zero means DefaultLeaderLeaseTimeout
	// (500 ms). At least MinTimeout and at most HeartbeatTimeout.
	LeaderLeaseTimeout time.Duration

	// Signer turns an epoch into a token for Token. Nil means epoch.Plain().
	Signer epoch.Signer

	// FSM, if set, receives the application's own log entries (those it
	// submits with Raft().Apply) and takes part in snapshots. The only
	// entries the library writes itself (member metadata, marked in
	// raft.Log.Extensions) never reach it; snapshots carry the metadata in
	// a header in front of the FSM's own bytes, which Restore strips. Nil means an internal FSM that
	// ignores everything.
	FSM raft.FSM

	// Meta is the metadata this node advertises with its membership,
	// typically the URL of its application API (at most MaxMetaLen bytes;
	// opaque to this package). It is replicated through the Raft log: the
	// node records it when it first leads (before it publishes that epoch)
	// and again whenever it changed, so every node can tell who leads and
	// how to reach it (Leadership.LeaderMeta, Status, NotLeaderError) —
	// a follower redirects a client without an address book of its own.
	// Empty: advertise nothing (a Meta given to AddMember, if any, stays).
	Meta string

	// Logger receives the election's and Raft's logs. raft's hclog is
	// adapted onto it, with raft's Info — state-transition chatter on a
	// healthy cluster — demoted to Debug, so at the usual Info level a
	// healthy cluster logs only the election's own few lines (an epoch
	// confirmed or withdrawn, a member added or removed, a handover on
	// Close) and a clean Close logs no ERROR line. Nil means slog.Default().
	Logger *slog.Logger

	// Roles names roles this group assigns to its members, one owner each,
	// each with its own fencing epoch (RoleEpoch; docs/DESIGN.md, "Roles").
	// A leader adds the names the group's role table lacks when it is
	// elected; it never removes one (RemoveRoles does). Each name has the
	// charset of ID without '.', and "<Cluster>.<role>" must be a valid
	// epoch cluster name (at most 64 bytes). At most MaxRoles.
	Roles []string

	// RoleLease is the leader's bound: it moves the roles of a member it
	// has not granted a renewal for RoleLease, so a dead member's roles
	// move about RoleLease after its last renewal (as an etcd lease's TTL).
	// A member holds its roles for 4/5 of RoleLease, on its own clock,
	// from the send time of a renewal its leader granted (R3), and renews
	// every 2/5 of that; the fifth in between covers clock drift of up to
	// ±10 % (docs/DESIGN.md, "Clock assumption"). Zero means 2 x
	// HeartbeatTimeout. At least MinTimeout.
	RoleLease time.Duration

	// NoRoles makes this member take part in the group without ever being
	// given a role: voters that stay light while non-voters do the work.
	NoRoles bool

	// roleClock, set by tests only, replaces the monotonic clock the role
	// lease is counted on (a clock that lies).
	roleClock func() time.Duration
	// roleLimit, set by tests only, replaces MaxRoles in the role table.
	roleLimit int
}

// Validate reports whether c can be given to New. Errors wrap
// ErrInvalidConfig and name the field.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	if err := epoch.ValidateName(c.ID); err != nil {
		return bad("ID: %v", err)
	}
	if err := epoch.ValidateName(c.Cluster); err != nil {
		return bad("Cluster: %v", err)
	}
	if strings.Contains(c.Cluster, ".") {
		return bad("Cluster %q has a '.': a dot is reserved for role epochs (\"<Cluster>.<role>\")", c.Cluster)
	}
	if c.DataDir == "" && !c.InMemory {
		return bad("DataDir is required unless InMemory is set")
	}
	if c.Transport == nil {
		return bad("Transport is required")
	}
	if len(c.Meta) > MaxMetaLen {
		return bad("Meta is %d bytes, above MaxMetaLen (%d)", len(c.Meta), MaxMetaLen)
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"HeartbeatTimeout", c.HeartbeatTimeout},
		{"ElectionTimeout", c.ElectionTimeout},
		{"LeaderLeaseTimeout", c.LeaderLeaseTimeout},
	} {
		if f.d < 0 {
			return bad("%s %v is negative", f.name, f.d)
		}
		if f.d > 0 && f.d < MinTimeout {
			return bad("%s %v is below %v", f.name, f.d, MinTimeout)
		}
	}
	d := c.withDefaults()
	if d.LeaderLeaseTimeout > d.HeartbeatTimeout {
		return bad("LeaderLeaseTimeout %v is above HeartbeatTimeout %v", d.LeaderLeaseTimeout, d.HeartbeatTimeout)
	}
	if d.HeartbeatTimeout > d.ElectionTimeout {
		return bad("HeartbeatTimeout %v is above ElectionTimeout %v", d.HeartbeatTimeout, d.ElectionTimeout)
	}
	if c.RoleLease < 0 || (c.RoleLease > 0 && c.RoleLease < MinTimeout) {
		return bad("RoleLease %v is negative or below %v", c.RoleLease, MinTimeout)
	}
	if len(c.Roles) > MaxRoles {
		return bad("Roles lists %d roles, above MaxRoles (%d)", len(c.Roles), MaxRoles)
	}
	seen := make(map[string]bool, len(c.Roles))
	for i, r := range c.Roles {
		if err := validRoleName(r); err != nil {
			return bad("Roles[%d]: %v", i, err)
		}
		if err := epoch.ValidateName(c.Cluster + "." + r); err != nil {
			return bad("Roles[%d]: the role's epoch cluster %q: %v", i, c.Cluster+"."+r, err)
		}
		if seen[r] {
			return bad("Roles lists %s twice", r)
		}
		seen[r] = true
	}
	if len(c.Bootstrap) > 0 {
		ids := make(map[string]bool, len(c.Bootstrap))
		addrs := make(map[string]bool, len(c.Bootstrap))
		for i, s := range c.Bootstrap {
			if err := epoch.ValidateName(s.ID); err != nil {
				return bad("Bootstrap[%d].ID: %v", i, err)
			}
			if s.Addr == "" {
				return bad("Bootstrap[%d] (%s) has no Addr", i, s.ID)
			}
			if ids[s.ID] {
				return bad("Bootstrap lists ID %s twice", s.ID)
			}
			if addrs[s.Addr] {
				return bad("Bootstrap lists Addr %s twice", s.Addr)
			}
			ids[s.ID], addrs[s.Addr] = true, true
		}
		if !ids[c.ID] {
			return bad("Bootstrap does not list this node (%s)", c.ID)
		}
	}
	return nil
}

// withDefaults returns a copy of c with zero fields replaced by defaults.
func (c Config) withDefaults() Config {
	if c.HeartbeatTimeout == 0 {
		c.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if c.ElectionTimeout == 0 {
		c.ElectionTimeout = DefaultElectionTimeout
	}
	if c.LeaderLeaseTimeout == 0 {
		c.LeaderLeaseTimeout = DefaultLeaderLeaseTimeout
	}
	if c.Signer == nil {
		c.Signer = epoch.Plain()
	}
	if c.FSM == nil {
		c.FSM = nopFSM{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.RoleLease == 0 {
		c.RoleLease = roleLeaseDefault(c.HeartbeatTimeout)
	}
	c.Roles = append([]string(nil), c.Roles...)
	c.Bootstrap = append([]Server(nil), c.Bootstrap...)
	return c
}
