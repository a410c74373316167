package election

import (
	"errors"
	"fmt"
	"net/http"
	"path"
	"sync"
	"time"
)

// ErrUnhealthy is matched by the *HealthError of a failed liveness or
// readiness check.
var ErrUnhealthy = errors.New("election: unhealthy")

// HealthError is the error of a failed Health check. It matches
// ErrUnhealthy.
type HealthError struct {
	Probe  string        // "live" or "ready"
	Reason string        // what is wrong, e.g. "no known leader"
	For    time.Duration // how long it has been so

	removed bool // the reason is ErrRemoved
}

// Error implements error.
func (e *HealthError) Error() string {
	return fmt.Sprintf("election: not %s: %s for %v", e.Probe, e.Reason, e.For.Round(time.Millisecond))
}

// Is reports whether target is ErrUnhealthy, or ErrRemoved when this node
// is not ready because it was removed from the cluster.
func (e *HealthError) Is(target error) bool {
	return target == ErrUnhealthy || (e.removed && target == ErrRemoved)
}

// HealthConfig configures Election.Health. Zero fields take the documented
// defaults.
type HealthConfig struct {
	// NoLeaderTimeout is how long this node may know no leader (an
	// election under way, this node cut off, the cluster without a quorum)
	// before Live fails. A partitioned leader steps down after
	// LeaderLeaseTimeout and from then on knows no leader, so it fails
	// LeaderLeaseTimeout + NoLeaderTimeout after it was cut off. Zero
	// means 10 × ElectionTimeout.
	NoLeaderTimeout time.Duration

	// ConfirmTimeout is how long Raft may make this node leader without it
	// confirming (or while it cannot keep) its epoch before Live fails: a
	// leader that cannot commit an entry of its own term. Zero means
	// 3 × ElectionTimeout (confirmation falls back to a Barrier after one).
	ConfirmTimeout time.Duration
}

// Health answers liveness and readiness probes for one Election: the
// embedded election's counterpart of client-go's HealthzAdaptor. It is an
// http.Handler (ServeHTTP) and is safe for concurrent use.
type Health struct {
	e                 *Election
	noLeader, confirm time.Duration
}

// Health returns the health checks of this node under cfg. ErrInvalidConfig:
// a negative timeout.
func (e *Election) Health(cfg HealthConfig) (*Health, error) {
	if cfg.NoLeaderTimeout < 0 || cfg.ConfirmTimeout < 0 {
		return nil, fmt.Errorf("%w: HealthConfig timeouts must not be negative", ErrInvalidConfig)
	}
	h := &Health{e: e, noLeader: cfg.NoLeaderTimeout, confirm: cfg.ConfirmTimeout}
	if h.noLeader == 0 {
		h.noLeader = 10 * e.cfg.ElectionTimeout
	}
	if h.confirm == 0 {
		h.confirm = 3 * e.cfg.ElectionTimeout
	}
	return h, nil
}

// Live reports whether this node is working as a member should: nil,
// unless it is closed (ErrClosed), or has known no leader for longer than
// NoLeaderTimeout, or Raft has made it leader but it has not held a
// confirmed epoch for longer than ConfirmTimeout (a *HealthError matching
// ErrUnhealthy). It recovers by itself once a leader is known again.
//
// A node that knows it was removed from the cluster (Election.Removed) is
// live: it knows no leader on purpose, and restarting it would change
// nothing. Ready tells that it cannot serve.
func (h *Health) Live() error {
	if h.e.closed.Load() {
		return ErrClosed
	}
	if h.e.Removed() {
		return nil
	}
	now := time.Now()
	noLeader, unconfirmed := h.e.clock.since(now)
	switch {
	case unconfirmed > h.confirm:
		return &HealthError{Probe: "live", Reason: "leader without a confirmed epoch", For: unconfirmed}
	case noLeader > h.noLeader:
		return &HealthError{Probe: "live", Reason: "no known leader", For: noLeader}
	}
	return nil
}

// Ready reports whether this node can serve now: Live holds and a leader
// is known at this moment — this node with a confirmed epoch, or another
// node it can redirect to. Unlike Live it fails at once, without waiting
// for a timeout, and recovers as soon as a leader is known. On a node
// removed from the cluster it fails with a *HealthError that also matches
// ErrRemoved, until the node is added again.
func (h *Health) Ready() error {
	if since := h.e.removedSince(); !since.IsZero() && !h.e.closed.Load() {
		return &HealthError{Probe: "ready", Reason: "removed from the cluster (add it again or retire it)",
			For: max(time.Since(since), time.Nanosecond), removed: true}
	}
	if err := h.Live(); err != nil {
		if he, ok := err.(*HealthError); ok {
			he.Probe = "ready"
		}
		return err
	}
	noLeader, unconfirmed := h.e.clock.since(time.Now())
	switch {
	case unconfirmed > 0:
		return &HealthError{Probe: "ready", Reason: "leader without a confirmed epoch", For: unconfirmed}
	case noLeader > 0:
		return &HealthError{Probe: "ready", Reason: "no known leader", For: noLeader}
	}
	return nil
}

// ServeHTTP answers a probe: a path ending in "/readyz" checks Ready, any
// other (conventionally "/livez" or "/healthz") checks Live. It answers 200
// "ok", or 503 with the error's text.
func (h *Health) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	check := h.Live
	if path.Base(r.URL.Path) == "readyz" {
		check = h.Ready
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := check(); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprintln(w, err)
		return
	}
	_, _ = fmt.Fprintln(w, "ok")
}

var _ http.Handler = (*Health)(nil)

// leaderClock remembers since when this node has known no leader and since
// when Raft has made it leader without a confirmed epoch; the watcher
// updates it with every Leadership it publishes.
type leaderClock struct {
	mu          sync.Mutex
	noLeader    time.Time     // zero: a leader is known
	unconfirmed time.Time     // zero: not leader without an epoch
	total       time.Duration // leaderless time before the current stretch
}

// leaderless returns the total time without a known leader up to now.
func (c *leaderClock) leaderless(now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.noLeader.IsZero() {
		return c.total
	}
	return c.total + now.Sub(c.noLeader)
}

func (c *leaderClock) track(l Leadership, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case l.LeaderID == "":
		if c.noLeader.IsZero() {
			c.noLeader = now
		}
		c.unconfirmed = time.Time{}
	case l.Self && !l.Leading():
		if c.unconfirmed.IsZero() {
			c.unconfirmed = now
		}
		c.endNoLeader(now)
	default:
		c.endNoLeader(now)
		c.unconfirmed = time.Time{}
	}
}

func (c *leaderClock) endNoLeader(now time.Time) {
	if !c.noLeader.IsZero() {
		c.total += now.Sub(c.noLeader)
		c.noLeader = time.Time{}
	}
}

// since returns how long each condition has held at now (zero: it does not).
func (c *leaderClock) since(now time.Time) (noLeader, unconfirmed time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.noLeader.IsZero() {
		noLeader = max(now.Sub(c.noLeader), time.Nanosecond)
	}
	if !c.unconfirmed.IsZero() {
		unconfirmed = max(now.Sub(c.unconfirmed), time.Nanosecond)
	}
	return noLeader, unconfirmed
}
