package election

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"
)

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// assignLoop is the leader's assigner (docs/DESIGN.md, "Reassignment"): one
// goroutine, woken by role entries applied here, renewals that change what
// the leader knows, and one timer for the earliest lease expiry that could
// matter. It does nothing on a node that does not lead.
func (rs *roles) assignLoop() {
	e := rs.e
	defer e.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-e.stop
		cancel()
	}()
	changed := true
	for {
		select {
		case <-e.stop:
			return
		case <-rs.assignCh:
			changed = true
		case <-timer.C:
		}
		next := rs.assignOnce(ctx, changed)
		changed = next == 0 // it appended entries: look again in full
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
	}
}

// plan is one pass's decisions: role -> new owner ("" revokes), and the
// old owners that lose a role.
type plan struct {
	set  map[string]string
	from map[string]bool
}

// passKey is what a pass's decisions depend on besides the role table and
// the leader's member state, whose every change pokes the assigner: the
// configuration, which members have expired, and whether a new leader's
// first bound is still running.
type passKey struct {
	term    uint64
	conf    string
	expired string
	first   bool
}

// assignOnce runs one pass and returns when the next pass is due at the
// latest. changed says the assigner was poked (or its last pass appended
// entries); a pass woken by its timer alone whose passKey is the last full
// pass's would decide nothing new, and only works out when to look next —
// so that a steady leader does not copy and sort the whole role table on
// every expiry check (the idle cost of many roles).
func (rs *roles) assignOnce(ctx context.Context, changed bool) time.Duration {
	e := rs.e
	idle := max(rs.bound, MinTimeout)
	if _, ok := e.held(); !ok {
		return idle // only a leader assigns; spare followers the table copy
	}
	servers, err := e.configuration()
	if err != nil {
		return idle
	}
	inConf := make(map[string]bool, len(servers))
	confIDs := make([]string, 0, len(servers))
	for _, s := range servers {
		inConf[string(s.ID)] = true
		confIDs = append(confIDs, string(s.ID))
	}
	slices.Sort(confIDs)

	rs.mu.Lock()
	term := rs.ls.term
	if t, ok := e.held(); !ok || term == 0 || t != term {
		rs.mu.Unlock()
		return idle
	}
	now := rs.clk()
	bound := rs.bound
	lastRenew := func(id string) time.Duration {
		if m := rs.ls.members[id]; m != nil && m.lastRenew > rs.ls.tc {
			return m.lastRenew
		}
		return rs.ls.tc
	}
	expired := func(id string) bool { return now > lastRenew(id)+bound }
	key := passKey{term: term, conf: strings.Join(confIDs, "\x00"), first: now <= rs.ls.tc+bound}
	// Every member the configuration or the leader knows: a revoked
	// role's previous owner may have left the configuration meanwhile.
	everyone := slices.Clone(confIDs)
	for id := range rs.ls.members {
		if !inConf[id] {
			everyone = append(everyone, id)
		}
	}
	slices.Sort(everyone)
	var exp []string
	for _, id := range everyone {
		if expired(id) {
			exp = append(exp, id)
		}
	}
	key.expired = strings.Join(exp, "\x00")
	next := idle
	wake := func(at time.Duration) { // look again when at has passed
		if d := at - now + time.Millisecond; d < next {
			next = max(d, MinTimeout)
		}
	}
	if !changed && key == rs.lastPass {
		for _, id := range everyone {
			if !expired(id) {
				wake(lastRenew(id) + bound)
			}
		}
		if key.first {
			wake(rs.ls.tc + bound)
		}
		rs.mu.Unlock()
		return next
	}
	rs.lastPass = key
	table := rs.t.grants() // under rs.mu: decide takes rs.mu, then the table's lock
	known := true          // every member has renewed in this term or expired
	var live []string
	for id := range inConf {
		m := rs.ls.members[id]
		switch {
		case expired(id):
		case m == nil || !m.renewed:
			known = false
		case !m.noRoles:
			live = append(live, id)
		}
	}
	slices.Sort(live)
	count := make(map[string]int, len(live))
	isLive := make(map[string]bool, len(live))
	for _, id := range live {
		count[id] = 0
		isLive[id] = true
	}
	least := func() string {
		best := ""
		for _, id := range live {
			if best == "" || count[id] < count[best] {
				best = id
			}
		}
		return best
	}
	p := plan{set: make(map[string]string), from: make(map[string]bool)}
	names := make([]string, 0, len(table))
	for r := range table {
		names = append(names, r)
	}
	slices.Sort(names)
	due := func(id string) { wake(lastRenew(id) + bound) } // when id's lease bound passes
	var unowned []string
	for _, r := range names {
		g := table[r]
		switch o := g.Owner; {
		case o == "":
			unowned = append(unowned, r)
		case expired(o):
			if to := rs.pickLocked(r, least, isLive); to != "" {
				p.set[r], p.from[o] = to, true
				count[to]++
			}
		case !inConf[o] || (rs.ls.members[o] != nil && rs.ls.members[o].noRoles):
			p.set[r], p.from[o] = "", true // handover: it stops first
			due(o)
		default:
			if isLive[o] {
				count[o]++
			}
			due(o)
		}
	}
	if !known && key.first {
		// Until every member has renewed with this leader (or its first
		// lease bound passed), hand out nothing new: a leader that just
		// started would give every role to the first member it heard
		// from and then move most of them again to balance.
		wake(rs.ls.tc + bound)
		unowned = nil
	}
	for _, r := range unowned {
		g := table[r]
		if prev := g.Prev; prev != "" && !expired(prev) {
			m := rs.ls.members[prev]
			if m == nil || m.applied < g.Grant {
				due(prev)
				continue // the previous owner has not stopped yet
			}
		}
		if to := rs.pickLocked(r, least, isLive); to != "" {
			p.set[r] = to
			count[to]++
		}
	}
	if len(p.set) == 0 && len(unowned) == 0 && known && len(live) > 1 && !rs.noBalance.Load() {
		rs.balanceLocked(table, names, live, count, &p)
	}
	for id := range p.from {
		rs.blockLocked(id)
	}
	rs.mu.Unlock()

	if len(p.set) == 0 {
		return next
	}
	rs.commitPlan(ctx, term, p)
	return 0 // look again at once: the entries may enable more
}

// announce carries the commit of the plan just applied to the followers at
// once. A follower learns a commit index only from an AppendEntries that
// carries entries or, with none to send, from raft's CommitTimeout tick
// (50–100 ms later); so a follower given a role started up to 100 ms after
// the leader had committed the grant — three quarters of a role failover's
// overhead beyond the lease bound (docs/PERFORMANCE.md, "Roles"). A barrier
// is an entry the FSM never sees: its AppendEntries carries the plan's
// commit index, one round trip after the commit. It is not waited for.
func (rs *roles) announce() {
	_ = rs.e.raft.Barrier(0)
}

// pickLocked chooses the new owner of r: the handover target if it is
// live, else the least-loaded live member.
func (rs *roles) pickLocked(r string, least func() string, isLive map[string]bool) string {
	if to, ok := rs.ls.prefer[r]; ok {
		delete(rs.ls.prefer, r)
		if isLive[to] {
			return to
		}
	}
	return least()
}

// balanceLocked plans handovers from the most to the least loaded live
// members until max - min <= 1 (R6).
func (rs *roles) balanceLocked(table map[string]RoleGrant, names, live []string, count map[string]int, p *plan) {
	byOwner := make(map[string][]string, len(live))
	for _, r := range names {
		if o := table[r].Owner; o != "" {
			if _, ok := count[o]; !ok {
				continue
			}
			byOwner[o] = append(byOwner[o], r)
		}
	}
	for {
		hi := slices.MaxFunc(live, func(a, b string) int { return cmp.Or(cmp.Compare(count[a], count[b]), cmp.Compare(b, a)) })
		lo := slices.MinFunc(live, func(a, b string) int { return cmp.Or(cmp.Compare(count[a], count[b]), cmp.Compare(a, b)) })
		if count[hi]-count[lo] <= 1 || len(byOwner[hi]) == 0 {
			return
		}
		rs0 := byOwner[hi]
		r := rs0[len(rs0)-1]
		byOwner[hi] = rs0[:len(rs0)-1]
		p.set[r], p.from[hi] = "", true
		rs.ls.prefer[r] = lo
		count[hi]--
		count[lo]++
	}
}

// commitPlan appends the plan in entries of at most maxRolesPerEntry roles.
// The old owners were blocked by assignOnce; each block ends with the
// index of the last entry.
func (rs *roles) commitPlan(ctx context.Context, term uint64, p plan) {
	names := make([]string, 0, len(p.set))
	for r := range p.set {
		names = append(names, r)
	}
	slices.Sort(names)
	var idx uint64
	var err error
	for len(names) > 0 && err == nil {
		n := min(len(names), maxRolesPerEntry)
		ent := &roleEntry{Set: make(map[string]string, n)}
		for _, r := range names[:n] {
			ent.Set[r] = p.set[r]
		}
		names = names[n:]
		idx, err = rs.apply(ctx, ent)
	}
	if err != nil {
		rs.e.log.Debug("roles: assignment failed", "error", err)
	} else if idx > 0 {
		rs.announce()
	}
	rs.mu.Lock()
	if err != nil {
		idx = 0 // the last entry failed: the blocks end (see leaderApply)
	}
	for id := range p.from {
		rs.unblockLocked(id, term, idx)
	}
	rs.mu.Unlock()
}
