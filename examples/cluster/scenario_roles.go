package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/termfence/termfence/epoch"
)

// scenarioRoles are the roles of the roles scenario.
var scenarioRoles = func() []string {
	rs := make([]string, 12)
	for i := range rs {
		rs[i] = fmt.Sprintf("job-%02d", i+1)
	}
	return rs
}()

// roleWriteEvery is how often a role's owner writes its resource.
const roleWriteEvery = 100 * time.Millisecond

// runRoles: many leaders on one group. Three `cluster node` processes
// share a dozen roles (election Config.Roles); each role's owner writes the
// role's resource on the fenced store with the role's own token (epoch
// "demo.<role>/<grant index>/<owner>"). The owner of several roles is
// frozen with SIGSTOP: after its role lease the leader gives its roles to
// the others, whose writes carry newer grants. SIGCONT: each of its role
// writers makes a late write with the old token, which the store refuses;
// then it is killed. Nothing acknowledged is lost.
func runRoles(ctx context.Context, e *env) (*summary, error) {
	st, err := e.addStore(ctx, "store", "sqlite", false)
	if err != nil {
		return nil, err
	}
	e.nodeArgs = []string{"-roles", strings.Join(scenarioRoles, ","), "-role-write-every", roleWriteEvery.String()}
	defer func() { e.nodeArgs = nil }()
	procs, err := e.startNodeProcs(ctx, st.url, nil)
	if err != nil {
		return nil, err
	}
	defer procs.stop()
	e.tl.print("scenario roles: %d roles on one election group of three node processes", len(scenarioRoles))
	e.tl.print("  %s", procs.describe())
	e.tl.print("  heartbeat %v (role lease 2x), each owner writes role/<name> every %v with its role token; store at %s", e.opts.hb, roleWriteEvery, st.url)

	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	held, err := waitRolesHeld(wctx, procs, st, "")
	if err != nil {
		return nil, fmt.Errorf("the roles were never all held and written: %w", err)
	}
	byOwner := map[string][]string{}
	for r, ep := range held {
		byOwner[ep.Leader] = append(byOwner[ep.Leader], r)
	}
	victim := ""
	for _, id := range procs.ids {
		slices.Sort(byOwner[id])
		e.tl.say(id, "holds %d roles: %s", len(byOwner[id]), strings.Join(byOwner[id], " "))
		if victim == "" || len(byOwner[id]) > len(byOwner[victim]) {
			victim = id
		}
	}
	lostRoles := byOwner[victim]
	if len(lostRoles) < 2 {
		return nil, fmt.Errorf("no node holds several roles: %v", byOwner)
	}

	v := procs.byID[victim]
	if err := v.Process.Signal(syscall.SIGSTOP); err != nil {
		return nil, err
	}
	stopped := time.Now()
	e.tl.say(victim, "kill -STOP %d: frozen while it holds %s", v.Process.Pid, strings.Join(lostRoles, " "))
	after, err := waitRolesHeld(wctx, procs, st, victim)
	if err != nil {
		return nil, fmt.Errorf("the frozen owner's roles never moved: %w", err)
	}
	moved := time.Since(stopped)
	for _, r := range lostRoles {
		e.tl.say("group", "%s: %s -> %s (grant %d -> %d)", r, victim, after[r].Leader, held[r].Term, after[r].Term)
	}
	e.tl.say("group", "every role of %s is held and written elsewhere %dms after the freeze", victim, moved.Milliseconds())
	before, err := st.c.status(ctx)
	if err != nil {
		return nil, err
	}

	if err := v.Process.Signal(syscall.SIGCONT); err != nil {
		return nil, err
	}
	e.tl.say(victim, "kill -CONT %d: its role writers wake holding the old tokens and write once more", v.Process.Pid)
	var now storeStatus
	err = waitFor(wctx, func() bool {
		now, err = st.c.status(ctx)
		if err != nil {
			return false
		}
		for _, r := range lostRoles {
			k := held[r].String()
			if now.RefusedBy[k]+now.AcceptedBy[k] <= before.RefusedBy[k]+before.AcceptedBy[k] {
				return false
			}
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("the woken owner did not write under each old grant: %w", err)
	}
	_ = v.Process.Kill()
	<-procs.done[victim]
	e.tl.say(victim, "killed")

	refused, lateAccepted, lost := 0, 0, 0
	for _, r := range lostRoles {
		k := held[r].String()
		refused += int(now.RefusedBy[k] - before.RefusedBy[k])
		late := int(now.AcceptedBy[k] - before.AcceptedBy[k])
		lateAccepted += late
		rec, ok, err := st.c.read(ctx, roleResource(r))
		if err != nil {
			return nil, err
		}
		if late > 0 || !ok || rec.Term < after[r].Term {
			lost++
			e.tl.say("result", "%s: the store accepted the old owner's write after the new owner's (record %s@%d): LOST", r, rec.Leader, rec.Term)
		}
	}
	if lost == 0 {
		e.tl.say("result", "every late write under an old grant was refused; each role's resource holds its new owner's data")
	}
	sum := newSummary("roles").
		add("roles", len(scenarioRoles)).add("victim", victim).add("moved", len(lostRoles)).
		add("failover", ms(moved)).add("lease", ms(2*e.opts.hb)).
		add("refused", refused).add("late_accepted", lateAccepted).add("lost", lost)
	sum.ok = lost == 0 && refused >= len(lostRoles)
	return sum, nil
}

// waitRolesHeld waits until every scenario role is held by a node other
// than except (as its /status reports) and the store's record of the role's
// resource was written under that very grant; it returns role -> epoch.
func waitRolesHeld(ctx context.Context, procs *nodeProcs, st *storeHandle, except string) (map[string]epoch.Epoch, error) {
	held := map[string]epoch.Epoch{}
	err := waitFor(ctx, func() bool {
		clear(held)
		for _, id := range procs.ids {
			if id == except {
				continue
			}
			var ns nodeStatus
			if err := procs.getStatus(ctx, id, &ns); err != nil {
				return false
			}
			for r, s := range ns.Held {
				ep, err := epoch.Parse(s)
				if err != nil {
					return false
				}
				held[r] = ep
			}
		}
		for _, r := range scenarioRoles {
			ep, ok := held[r]
			if !ok {
				return false
			}
			rec, found, err := st.c.read(ctx, roleResource(r))
			if err != nil || !found || rec.Term != ep.Term || rec.Leader != ep.Leader {
				return false
			}
		}
		return true
	})
	return held, err
}
