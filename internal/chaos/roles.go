package chaos

import (
	"context"
	"fmt"
	"math/rand"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/termfence/termfence/epoch"
)

// Roles in the fault suite (Config.Roles > 0). The election group
// assigns named roles job-01..job-NN to its members; each role's owner writes
// the role's store resource, role/NAME, with the role's own token (epoch
// "chaos.NAME/<grant index>/<owner>"). The harness's role writers send each
// write to the node they believe holds the role (POST /role-write?role=NAME;
// the node takes its role epoch before it reads the body), readers read the
// role resources from the store, and the status poller records each node's
// held roles as that role's claims. The nemesis adds a fault of its own:
// SIGSTOP of a node that holds roles, with role writes pinned in its
// handler, long enough (3-8 leases) for the group to move its roles, then
// SIGCONT: the pinned writes reach the store with the old grants, and each
// pinned role's resource is read right after. Every other fault (leader
// pauses, kills, partitions, resigns, store kills) applies as usual.
//
// The checker judges each role on its own history (its writes, its reads,
// its owners' claims): a role's grant indexes are log indexes, unrelated to
// the group's terms and shared by the roles one log entry granted, so the
// roles cannot go into one history with the group's resources. Per role:
// the store never accepted an older grant after a newer one (stale
// accepted), no acknowledged write was lost, the history is linearizable
// against the fenced register, and no grant of a role was claimed by two
// owners. Violations are also counted in the run's Report.

// roleResourcePrefix is examples/cluster's: role/NAME takes only role NAME's
// tokens.
const roleResourcePrefix = "role/"

// roleName is the i-th role of a run.
func roleName(i int) string { return fmt.Sprintf("job-%02d", i+1) }

// roleNames are the run's roles.
func (c Config) roleNames() []string {
	out := make([]string, c.Roles)
	for i := range out {
		out[i] = roleName(i)
	}
	return out
}

// roleArgs are the node flags of a run with roles.
func (c Config) roleArgs() []string {
	if c.Roles <= 0 {
		return nil
	}
	return []string{"-roles", strings.Join(c.roleNames(), ",")}
}

// roleMaxPause bounds a role owner's pause: below the node's 5 s store
// timeout (examples/cluster handleRoleWrite).
const roleMaxPause = 4 * time.Second

// roleClientBase numbers the role writers' and readers' clients apart from
// the group's.
const roleClientBase = 1000

// roleState is what the poller learned about the roles: the node believed
// to hold each role, and each role's claims.
type roleState struct {
	mu     sync.Mutex
	owner  map[string]int    // role -> node index, -1: unknown
	grant  map[string]uint64 // role -> grant index of that belief
	acked  map[string]uint64 // role -> highest grant a role write was acknowledged with
	claims map[string]*Recorder
}

// noteRoles records node i's held roles (its GET /status "held") as claims
// and beliefs.
func (w *workload) noteRoles(i int, at time.Duration, st nodeStatus) {
	rs := w.roles
	if rs == nil {
		return
	}
	for r, s := range st.Held {
		ep, err := epoch.Parse(s)
		if err != nil {
			continue
		}
		rs.mu.Lock()
		rec := rs.claims[r]
		if rec == nil {
			rec = &Recorder{}
			rs.claims[r] = rec
		}
		if ep.Term >= rs.grant[r] {
			rs.owner[r], rs.grant[r] = i, ep.Term
		}
		rs.mu.Unlock()
		rec.Claim(Claim{At: at, Node: w.c.nodes[i].id, Term: ep.Term, Leader: ep.Leader})
		w.prog.noteRoleHeld(r, at)
	}
}

// roleOwner returns the node believed to hold role r, or -1.
func (w *workload) roleOwner(r string) int {
	w.roles.mu.Lock()
	defer w.roles.mu.Unlock()
	if i, ok := w.roles.owner[r]; ok {
		return i
	}
	return -1
}

// setRoleOwner takes a 503's owner hint (a node ID) for role r.
func (w *workload) setRoleOwner(r, id string) {
	if i := w.c.indexOf(id); i >= 0 {
		w.roles.mu.Lock()
		w.roles.owner[r] = i
		w.roles.mu.Unlock()
	}
}

// startRoles starts the role writers and readers of a run with roles.
func (w *workload) startRoles(ctx context.Context, wg *sync.WaitGroup, rng *rand.Rand) {
	if w.cfg.Roles <= 0 {
		return
	}
	writers := w.cfg.RoleWriters
	if writers == 0 {
		writers = 4
	}
	names := w.cfg.roleNames()
	for cl := 0; cl < writers; cl++ {
		crng := rand.New(rand.NewSource(rng.Int63()))
		wg.Add(1)
		go func() { defer wg.Done(); w.roleWriter(ctx, roleClientBase+cl, names, crng) }()
	}
	// One reader per four roles, each reading its roles in turn.
	for k := 0; k*4 < len(names); k++ {
		group := names[k*4 : min(len(names), k*4+4)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(w.cfg.ReadEvery)
			defer tick.Stop()
			for j := 0; ; j++ {
				if op := w.read(ctx, roleClientBase+writers+k, roleResourcePrefix+group[j%len(group)]); op.Outcome != ReadFailed {
					w.rec.Add(op)
				}
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
}

// roleWriter writes random roles' resources through their believed owners
// until ctx ends; like writer, it leaves a write whose role moved to finish
// in the background.
func (w *workload) roleWriter(ctx context.Context, client int, names []string, rng *rand.Rand) {
	tick := time.NewTicker(w.cfg.PollEvery)
	defer tick.Stop()
	for ctx.Err() == nil {
		r := names[rng.Intn(len(names))]
		target := w.roleOwner(r)
		if target < 0 {
			target = rng.Intn(len(w.c.nodes))
		}
		op := Op{Client: client, Kind: Write, Resource: roleResourcePrefix + r, Node: w.c.nodes[target].id, Value: w.nextValue(client)}
		done := make(chan Outcome, 1)
		w.inflight.Add(1)
		go func() {
			defer w.inflight.Done()
			done <- w.roleWrite(op, target, r)
		}()
		var out Outcome
	wait:
		for {
			select {
			case out = <-done:
				break wait
			case <-tick.C:
				if o := w.roleOwner(r); o >= 0 && o != target {
					out = Indeterminate // detached: it finishes in the background
					break wait
				}
			}
		}
		switch out {
		case Acked, Refused:
		default:
			sleepCtx(ctx, w.cfg.PollEvery)
		}
		if w.cfg.Think > 0 {
			sleepCtx(ctx, time.Duration(rng.Int63n(int64(w.cfg.Think))))
		}
	}
}

// roleWrite sends op to node i's POST /role-write, records it and returns
// its outcome. It is not cancelled with the run: the run waits for it.
func (w *workload) roleWrite(op Op, i int, r string) Outcome {
	op.Call = w.rec.Now()
	st, body, err := w.c.do(context.Background(), http.MethodPost, "http://"+w.c.nodes[i].proc.addr+"/role-write?role="+url.QueryEscape(r),
		map[string]string{"resource": op.Resource, "value": op.Value}, w.cfg.WriteTimeout)
	op.Return = w.rec.Now()
	if hint := classify(&op, st, body, err); hint != "" {
		w.setRoleOwner(r, hint)
	}
	if op.Outcome == Acked {
		w.roles.mu.Lock()
		w.roles.acked[r] = max(w.roles.acked[r], op.Term)
		w.roles.mu.Unlock()
		w.prog.noteRoleAck(r, op.Call)
	}
	if st == http.StatusNotFound && strings.Contains(op.Detail, "unknown role") {
		// The node has not applied the role table yet (a new group):
		// nothing was sent to the store.
		op.Outcome, op.Contract = NotLeader, ""
	}
	w.rec.Add(op)
	return op.Outcome
}

// finalRoles reads every role's resource after the run into final.
func (w *workload) finalRoles(ctx context.Context, final map[string]FinalState, highest map[string]uint64) error {
	for k, r := range w.cfg.roleNames() {
		name := roleResourcePrefix + r
		op := w.read(ctx, -1, name)
		op.Client = roleClientBase + 500 + k
		if op.Outcome == ReadFailed {
			return fmt.Errorf("chaos: final read of %s: %s", name, op.Detail)
		}
		w.rec.Add(op)
		final[name] = FinalState{Found: op.Outcome == ReadValue, Value: op.Value, Term: op.Term, Leader: op.Leader, Highest: highest[name]}
	}
	return nil
}

// pauseRoleOwner SIGSTOPs a node that holds roles — the pick-th of them
// (mod their number) — for d, with up to four writes of its roles pinned
// in its /role-write handler: two whose bodies are sent just before the
// SIGSTOP, two just before the SIGCONT. The pause lasts at least until a
// write of every pinned role was acknowledged under a newer grant than the
// paused node's (up to roleMaxPause in all), so the held writes are late.
// Then it continues the node, collects the pinned writes' answers and
// reads each pinned role's resource at once, before its new owner's next
// write can hide what the late write did.
func (n *nemesis) pauseRoleOwner(ctx context.Context, pick int, d time.Duration) error {
	byNode := map[int][]string{}
	n.w.roles.mu.Lock()
	for r, i := range n.w.roles.owner {
		if i >= 0 && n.c.nodes[i].proc.running() {
			byNode[i] = append(byNode[i], r)
		}
	}
	n.w.roles.mu.Unlock()
	var owners []int
	for i := range byNode {
		owners = append(owners, i)
	}
	if len(owners) == 0 {
		n.logf("fault %d: pause role owner: no node is known to hold a role", n.faults+1)
		return nil
	}
	sort.Ints(owners)
	vi := owners[pick%len(owners)]
	roles := byNode[vi]
	sort.Strings(roles)
	roles = roles[:min(len(roles), 4)]
	n.w.roles.mu.Lock()
	before := map[string]uint64{}
	for _, r := range roles {
		before[r] = n.w.roles.grant[r]
	}
	n.w.roles.mu.Unlock()
	var race, held []*pinned
	for k := 0; k < 4; k++ {
		r := roles[k%len(roles)]
		p := n.w.openPinnedAt(ctx, roleClientBase+400+k, vi, roleResourcePrefix+r, "/role-write?role="+url.QueryEscape(r))
		switch {
		case p == nil:
		case k < 2:
			race = append(race, p)
		default:
			held = append(held, p)
		}
	}
	nd := n.c.nodes[vi]
	var outcomes []string
	err := n.pinnedStop(nd, race, held, func() {
		n.logf("fault %d: SIGSTOP role owner %s (roles %s) for %v", n.faults+1, nd.id, strings.Join(roles, " "), d.Round(time.Millisecond))
		sleepCtx(ctx, d)
		// The whole pause stays below roleMaxPause: the node's store
		// request, begun before the pause for a racing write, times out
		// 5 s after the request arrived (a 502 while the store is up,
		// which the checker counts).
		moved := n.waitRolesMoved(ctx, before, max(0, roleMaxPause-d))
		n.logf("  SIGCONT %s after %v; roles moved and written by their new owners: %t", nd.id, (d + moved).Round(time.Millisecond), moved >= 0)
	}, func(p *pinned) {
		outcomes = append(outcomes, fmt.Sprintf("%s:%v@%d", strings.TrimPrefix(p.op.Resource, roleResourcePrefix), p.op.Outcome, p.op.Term))
		if op := n.w.read(ctx, roleClientBase+450, p.op.Resource); op.Outcome != ReadFailed {
			n.w.rec.Add(op)
		}
	})
	if err != nil {
		return err
	}
	n.logf("  pinned role writes via %s: %v", nd.id, outcomes)
	return nil
}

// splitRoles takes the role resources' operations out of h and returns
// them as one history per role, with that role's claims.
func splitRoles(h History, w *workload) (History, map[string]History) {
	if w.roles == nil {
		return h, nil
	}
	out := map[string]History{}
	for _, r := range w.cfg.roleNames() {
		rh := History{Final: map[string]FinalState{}, Slack: h.Slack}
		w.roles.mu.Lock()
		rec := w.roles.claims[r]
		w.roles.mu.Unlock()
		if rec != nil {
			rh.Claims = rec.History(nil, 0).Claims
		}
		if f, ok := h.Final[roleResourcePrefix+r]; ok {
			rh.Final[roleResourcePrefix+r] = f
		}
		out[r] = rh
	}
	var ops []Op
	for _, op := range h.Ops {
		r, ok := strings.CutPrefix(op.Resource, roleResourcePrefix)
		if !ok {
			ops = append(ops, op)
			continue
		}
		rh := out[r]
		rh.Ops = append(rh.Ops, op)
		out[r] = rh
	}
	h.Ops = ops
	final := map[string]FinalState{}
	for res, f := range h.Final {
		if !strings.HasPrefix(res, roleResourcePrefix) {
			final[res] = f
		}
	}
	h.Final = final
	return h, out
}

// RoleReport is the verdict on one role's history.
type RoleReport struct {
	Role string
	Report
}

// RolesReport is the verdict on every role of a run.
type RolesReport struct {
	Roles []RoleReport // sorted by role
}

// checkRoles checks each role's history on its own.
func checkRoles(hs map[string]History, timeout time.Duration) RolesReport {
	var out RolesReport
	for _, r := range sortedKeys(hs) {
		out.Roles = append(out.Roles, RoleReport{Role: r, Report: Check(hs[r], timeout)})
	}
	return out
}

// Totals sums the roles' reports; Linearizable is the worst verdict.
func (rr RolesReport) Totals() Report {
	t := Report{Linearizable: porcupine.Ok}
	for _, r := range rr.Roles {
		t.Ops += r.Ops
		t.Acked += r.Acked
		t.RefusedStale += r.RefusedStale
		t.Indeterminate += r.Indeterminate
		t.StaleAccepted += r.StaleAccepted
		t.Lost += r.Lost
		t.MaxTerm = max(t.MaxTerm, r.MaxTerm)
		switch {
		case r.Linearizable == porcupine.Illegal:
			t.Linearizable = porcupine.Illegal
		case r.Linearizable == porcupine.Unknown && t.Linearizable == porcupine.Ok:
			t.Linearizable = porcupine.Unknown
		}
	}
	return t
}

// Line is the roles' summary line, then one line per role:
//
//	chaos roles: roles=N ops=N acked=N refused_stale=N stale_accepted=0 lost=0 linearizable=true
func (rr RolesReport) Line() string {
	if len(rr.Roles) == 0 {
		return ""
	}
	t := rr.Totals()
	var b strings.Builder
	fmt.Fprintf(&b, "chaos roles: roles=%d ops=%d acked=%d refused_stale=%d indeterminate=%d stale_accepted=%d lost=%d linearizable=%s",
		len(rr.Roles), t.Ops, t.Acked, t.RefusedStale, t.Indeterminate, t.StaleAccepted, t.Lost, linWord(t.Linearizable))
	for _, r := range rr.Roles {
		fmt.Fprintf(&b, "\n  role %s: ops=%d acked=%d refused_stale=%d stale_accepted=%d lost=%d linearizable=%s",
			r.Role, r.Ops, r.Acked, r.RefusedStale, r.StaleAccepted, r.Lost, linWord(r.Linearizable))
	}
	return b.String()
}

func linWord(c porcupine.CheckResult) string {
	switch c {
	case porcupine.Ok:
		return "true"
	case porcupine.Illegal:
		return "false"
	}
	return "unknown"
}

// foldRoles adds the roles' violations to r, so that OK, Passed and
// Violated judge the roles too: stale accepted and lost writes are added,
// an Illegal or Unknown role history makes r's verdict so (the worse of
// the two), and each role's details, leader conflicts and contract breaks
// are appended with the role's name.
func (r *Report) foldRoles(rr RolesReport) {
	for _, x := range rr.Roles {
		r.StaleAccepted += x.StaleAccepted
		r.Lost += x.Lost
		switch {
		case x.Linearizable == porcupine.Illegal:
			r.Linearizable = porcupine.Illegal
		case x.Linearizable == porcupine.Unknown && r.Linearizable == porcupine.Ok:
			r.Linearizable = porcupine.Unknown
		}
		for _, s := range x.Details {
			r.Details = append(r.Details, "role "+x.Role+": "+s)
		}
		for _, s := range x.LeaderConflicts {
			r.LeaderConflicts = append(r.LeaderConflicts, "role "+x.Role+": "+s)
		}
		for _, s := range x.ContractBreaks {
			r.ContractBreaks = append(r.ContractBreaks, "role "+x.Role+": "+s)
		}
	}
}

// waitRolesMoved waits, up to limit, until a write of every role in before
// was acknowledged with a newer grant than before's; it returns how long it
// waited, or -1 if the limit passed first.
func (n *nemesis) waitRolesMoved(ctx context.Context, before map[string]uint64, limit time.Duration) time.Duration {
	start := time.Now()
	tick := time.NewTicker(n.cfg.PollEvery)
	defer tick.Stop()
	for {
		n.w.roles.mu.Lock()
		all := true
		for r, g := range before {
			if n.w.roles.acked[r] <= g {
				all = false
			}
		}
		n.w.roles.mu.Unlock()
		if all {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			return -1
		}
		select {
		case <-ctx.Done():
			return -1
		case <-tick.C:
		}
	}
}
