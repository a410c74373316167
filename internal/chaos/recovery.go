package chaos

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/termfence/termfence/internal/liveness"
	"github.com/termfence/termfence/internal/testwait"
)

// Liveness: after each fault ends (the partition healed, the paused node
// continued, the killed process restarted on its data) the nemesis waits
// for full service before it draws the next fault, and records how long
// that took (internal/liveness). Full service is, all seen after the
// fault's end:
//
//   - a leader with a confirmed epoch: a status poll found a node in state
//     Leader handing out its epoch;
//   - writes accepted by the store: a group write called after the end was
//     acknowledged;
//   - with Config.Roles, every role owned with its work running: a poll
//     found a node holding each role, and a write of each role called
//     after the end was acknowledged.
//
// If that does not happen within the bound (recoveryBound), the run fails
// (Report.OK, Report.Passed) naming the fault and what was missing, and the
// nemesis injects nothing more: the run goes on to its final checks at once.

// progress is what the liveness oracle reads: the latest moments, on the
// recorder's clock, at which each part of service was seen working.
type progress struct {
	mu       sync.Mutex
	claim    time.Duration            // a poll found a leader with a confirmed epoch
	ack      time.Duration            // the call of the latest acknowledged group write
	roleHeld map[string]time.Duration // role -> a poll found a node holding it
	roleAck  map[string]time.Duration // role -> the call of its latest acknowledged write
}

func (p *progress) noteClaim(at time.Duration) {
	p.mu.Lock()
	p.claim = max(p.claim, at)
	p.mu.Unlock()
}

func (p *progress) noteAck(call time.Duration) {
	p.mu.Lock()
	p.ack = max(p.ack, call)
	p.mu.Unlock()
}

func (p *progress) noteRoleHeld(role string, at time.Duration) {
	p.mu.Lock()
	if p.roleHeld == nil {
		p.roleHeld = map[string]time.Duration{}
	}
	p.roleHeld[role] = max(p.roleHeld[role], at)
	p.mu.Unlock()
}

func (p *progress) noteRoleAck(role string, call time.Duration) {
	p.mu.Lock()
	if p.roleAck == nil {
		p.roleAck = map[string]time.Duration{}
	}
	p.roleAck[role] = max(p.roleAck[role], call)
	p.mu.Unlock()
}

// missing says what of full service has not been seen since the moment
// since (on the recorder's clock), "" if everything has: the Ready of
// internal/liveness.
func (p *progress) missing(since time.Duration, roles []string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out, unheld, idle []string
	if p.claim < since {
		out = append(out, "no leader with a confirmed epoch")
	}
	if p.ack < since {
		out = append(out, "no write accepted by the store")
	}
	for _, r := range roles {
		if t, ok := p.roleHeld[r]; !ok || t < since {
			unheld = append(unheld, r)
		} else if t, ok := p.roleAck[r]; !ok || t < since {
			idle = append(idle, r)
		}
	}
	sort.Strings(unheld)
	sort.Strings(idle)
	if len(unheld) > 0 {
		out = append(out, "roles held by no node: "+strings.Join(unheld, " "))
	}
	if len(idle) > 0 {
		out = append(out, "roles held with no write accepted: "+strings.Join(idle, " "))
	}
	return strings.Join(out, "; ")
}

// recoveryBase is the time full service may take to come back after a
// fault ends on a quiet machine, derived from the run's timeouts (H is
// Config.Heartbeat, the nodes' -heartbeat: raft's heartbeat and election
// timeouts are H, the leader lease H/2, the role lease 2H):
//
//   - 2H: the followers notice the leader is gone (raft's randomized
//     heartbeat timeout, H to 2H);
//   - 8H: up to four election rounds (pre-vote and vote; a split vote
//     waits another H to 2H);
//   - 2H: the winner confirms its term (its own entry committed, waited
//     for up to an election timeout, then a barrier);
//   - 8H: a second leader change, as when a continued leader steps down
//     only after its successor was elected;
//   - with roles, 4H: a lost owner's roles move after the role lease and
//     its margin (2H and less), then the grant commits;
//   - 4 polls and a write's store delay: the clients see the new leader
//     and write through it;
//   - 2 s: processes restarted with the fault, and the harness itself,
//     being scheduled.
//
// Config.RecoveryBound replaces it.
func (c Config) recoveryBase() time.Duration {
	if c.RecoveryBound > 0 {
		return c.RecoveryBound
	}
	b := 20*c.Heartbeat + 4*c.PollEvery + c.WriteDelay + 2*time.Second
	if c.Roles > 0 {
		b += 4 * c.Heartbeat
	}
	return b
}

// recoveryBound is the bound for a fault that ends now: recoveryBase
// scaled for the machine's load, now or when the run began, whichever is
// higher (internal/testwait); exactly Config.RecoveryBound when set.
func (c Config) recoveryBound() time.Duration {
	if c.RecoveryBound > 0 {
		return c.RecoveryBound
	}
	return time.Duration(float64(c.recoveryBase()) * max(testwait.Factor(), testwait.FactorNow()))
}

// awaitRecovery waits, after fault number n.faults (of kind) ended at
// ended (recorder clock; wall is the same moment on the wall clock), for
// full service, and records the recovery. It returns false when service
// did not come back within the bound.
func (n *nemesis) awaitRecovery(ctx context.Context, kind faultKind, ended time.Duration, wall time.Time) bool {
	bound := n.cfg.recoveryBound()
	name := fmt.Sprintf("fault %d (%v)", n.faults, kind)
	if said := n.said.Load(); said != nil {
		if what, ok := strings.CutPrefix(*said, fmt.Sprintf("fault %d: ", n.faults)); ok {
			if !strings.HasPrefix(what, kind.String()+":") {
				what = kind.String() + ": " + what
			}
			name = fmt.Sprintf("fault %d (%s)", n.faults, what)
		}
	}
	rec, err := liveness.Await(ctx, name, wall, bound, n.cfg.PollEvery, func() string {
		return n.w.prog.missing(ended, n.cfg.roleNames())
	})
	if err != nil {
		return true // the run was cancelled: no verdict
	}
	n.live.Bound = max(n.live.Bound, bound)
	n.live.Add(rec)
	if rec.Late {
		n.logf("LIVENESS: %s", rec)
		return false
	}
	n.logf("  %s", rec)
	return true
}

// noting wraps logf so that the nemesis remembers its last line about a
// fault ("fault N: partition: isolate n2 for 1.029s"): the fault's name in
// its recovery.
func (n *nemesis) noting(logf func(format string, args ...any)) func(format string, args ...any) {
	return func(format string, args ...any) {
		if s := fmt.Sprintf(format, args...); strings.HasPrefix(s, "fault ") {
			n.said.Store(&s)
		}
		logf(format, args...)
	}
}
