package election

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
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
	for {
		select {
		case <-e.stop:
			return
		case <-rs.assignCh:
		case <-timer.C:
		}
		next := rs.assignOnce(ctx)
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

// assignOnce runs one pass and returns when the next pass is due at the
// latest.
func (rs *roles) assignOnce(ctx context.Context) time.Duration {
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
	for _, s := range servers {
		inConf[string(s.ID)] = true
	}
	table := rs.t.grants()

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
	known := true // every member has renewed in this term or expired
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
	next := idle
	due := func(id string) { // wake when id's lease bound passes
		if d := lastRenew(id) + bound - now + time.Millisecond; d < next {
			next = max(d, MinTimeout)
		}
	}
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
	if !known && now <= rs.ls.tc+bound {
		// Until every member has renewed with this leader (or its first
		// lease bound passed), hand out nothing new: a leader that just
		// started would give every role to the first member it heard
		// from and then move most of them again to balance.
		if d := rs.ls.tc + bound - now + time.Millisecond; d < next {
			next = max(d, MinTimeout)
		}
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
	}
	rs.mu.Lock()
	for id := range p.from {
		rs.unblockLocked(id, term, idx, err)
	}
	rs.mu.Unlock()
}
