package election

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// probe serves one request to h's handler and returns the status and body.
func probe(h *Health, path string) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func healthOf(t *testing.T, nd *node, cfg HealthConfig) *Health {
	t.Helper()
	h, err := nd.el.Health(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// unhealthyFor returns the *HealthError of err, failing the test unless it
// matches ErrUnhealthy with this reason and has lasted at least min.
func unhealthyFor(t *testing.T, err error, reason string, min time.Duration) *HealthError {
	t.Helper()
	var he *HealthError
	if !errors.As(err, &he) || !errors.Is(err, ErrUnhealthy) || he.Reason != reason {
		t.Fatalf("health error %v, want %q", err, reason)
	}
	if he.For < min {
		t.Fatalf("unhealthy after %v of %q, before the configured %v", he.For, reason, min)
	}
	return he
}

// TestHealthPartitionedLeader: a leader cut off from every peer (Faulty's
// Isolate) steps down after LeaderLeaseTimeout and then knows no leader:
// its liveness fails once that has lasted NoLeaderTimeout (never sooner),
// over HTTP too (503 on /livez and /readyz), while the majority elects a
// new leader; healed, it follows that leader and is healthy again (200).
func TestHealthPartitionedLeader(t *testing.T) {
	const timeout = 150 * time.Millisecond
	c := newCluster(t, 3)
	ld, ep := c.leader()
	h := healthOf(t, ld, HealthConfig{NoLeaderTimeout: timeout})
	waitFor(t, "the leader healthy", func() bool { return h.Live() == nil && h.Ready() == nil })
	if code, body := probe(h, "/livez"); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Fatalf("/livez on a healthy leader: %d %q", code, body)
	}

	c.quietly("partitioned leader", func() error {
		ld.net.Isolate()
		var err error
		waitFor(t, "the partitioned leader unhealthy", func() bool {
			err = h.Live()
			return err != nil
		})
		unhealthyFor(t, err, "no known leader", timeout)
		if code, body := probe(h, "/livez"); code != http.StatusServiceUnavailable || !strings.Contains(body, "no known leader") {
			t.Fatalf("/livez on the partitioned leader: %d %q", code, body)
		}
		if code, _ := probe(h, "/readyz"); code != http.StatusServiceUnavailable {
			t.Fatalf("/readyz on the partitioned leader: %d", code)
		}
		nld, _ := c.leaderAbove(ep.Term, ld)
		ld.net.Heal()
		waitFor(t, "the old leader follows "+nld.id+" and is healthy", func() bool {
			return h.Live() == nil && h.Ready() == nil
		})
		return nil
	})
	if code, _ := probe(h, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz after recovery: %d", code)
	}
}

// TestHealthNoLeader: with two of three nodes gone the last one has no
// quorum and no leader: readiness fails at once (a Health with an hour's
// NoLeaderTimeout is not ready but still live), liveness once
// NoLeaderTimeout has passed; with the others back it is healthy again.
func TestHealthNoLeader(t *testing.T) {
	const timeout = 150 * time.Millisecond
	c := newCluster(t, 3)
	ld, _ := c.leader()
	h := healthOf(t, ld, HealthConfig{NoLeaderTimeout: timeout})
	patient := healthOf(t, ld, HealthConfig{NoLeaderTimeout: time.Hour})
	waitFor(t, "healthy", func() bool { return h.Live() == nil && h.Ready() == nil })
	var others []*node
	for _, nd := range c.nodes {
		if nd != ld {
			others = append(others, nd)
		}
	}
	c.quietly("no quorum", func() error {
		for _, nd := range others {
			c.crash(nd)
		}
		waitFor(t, "not ready without a leader", func() bool { return patient.Ready() != nil })
		unhealthyFor(t, patient.Ready(), "no known leader", 0)
		if err := patient.Live(); err != nil {
			t.Fatalf("Live with an hour's NoLeaderTimeout: %v", err)
		}
		var err error
		waitFor(t, "not live after NoLeaderTimeout", func() bool { err = h.Live(); return err != nil })
		unhealthyFor(t, err, "no known leader", timeout)
		for _, nd := range others {
			c.start(nd)
		}
		waitFor(t, "healthy again", func() bool {
			return h.Live() == nil && h.Ready() == nil && patient.Ready() == nil
		})
		return nil
	})
}

// TestHealthUnconfirmedLeader: a node Raft made leader that cannot confirm
// its epoch (its confirm worker held back) is not ready at once and not
// live after ConfirmTimeout; released, it confirms and is healthy.
func TestHealthUnconfirmedLeader(t *testing.T) {
	const timeout = 150 * time.Millisecond
	c := newCluster(t, 3)
	ld, ep := c.leader()
	var releases []func()
	hs := map[*node]*Health{}
	for _, nd := range c.nodes {
		releases = append(releases, holdConfirm(nd))
		hs[nd] = healthOf(t, nd, HealthConfig{ConfirmTimeout: timeout, NoLeaderTimeout: time.Hour})
	}
	defer func() {
		for _, r := range releases {
			r()
		}
	}()
	rctx, cancel := context.WithTimeout(t.Context(), waitLong)
	defer cancel()
	if err := ld.el.Resign(rctx); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	var nld *node
	waitFor(t, "a raft leader above the old term that holds no epoch", func() bool {
		for _, nd := range c.nodes {
			if nd.el.Raft().State() == raft.Leader && nd.el.Raft().CurrentTerm() > ep.Term {
				nld = nd
				return true
			}
		}
		return false
	})
	h := hs[nld]
	waitFor(t, "not ready", func() bool { return h.Ready() != nil })
	var err error
	waitFor(t, "not live after ConfirmTimeout", func() bool { err = h.Live(); return err != nil })
	unhealthyFor(t, err, "leader without a confirmed epoch", timeout)
	for _, r := range releases {
		r()
	}
	waitFor(t, "healthy once confirmed", func() bool { return h.Live() == nil && h.Ready() == nil })
	c.leader() // some node holds an epoch again (not always nld: it may have lost its term meanwhile)
}

// TestHealthConfig: negative timeouts are refused; a closed Election is
// neither live nor ready.
func TestHealthConfig(t *testing.T) {
	c := newCluster(t, 1)
	nd := c.nodes[0]
	c.leader()
	if _, err := nd.el.Health(HealthConfig{NoLeaderTimeout: -1}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("negative NoLeaderTimeout: %v", err)
	}
	h := healthOf(t, nd, HealthConfig{})
	c.stop(nd)
	if h.Live() != ErrClosed || h.Ready() != ErrClosed {
		t.Fatalf("after Close: Live %v, Ready %v", h.Live(), h.Ready())
	}
	if code, _ := probe(h, "/healthz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/healthz after Close: %d", code)
	}
}
