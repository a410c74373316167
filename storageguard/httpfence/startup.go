package httpfence

import (
	"context"
	"sync"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// maxHold is the longest a request may hold its epoch: its Timeout, then,
// if the backend may still act on it, the backend's timeout after the cut,
// and the grace to write the proxy's own answer.
func (p *proxy) maxHold() time.Duration { return p.timeout + p.backendTimeout + writeGrace }

// startup keeps a proxy that may have been restarted from forwarding a
// newer epoch while the backend may still act on a request that the
// previous process forwarded. The fence's high-water mark is durable, the
// previous process's holds were not: for each resource, the epoch that was
// highest when this process first saw the resource (before it admitted
// anything for it) is the only one that may have requests in flight at the
// backend, and a request under a newer epoch is forwarded only once the
// longest hold the previous process could have had (maxHold, counted from
// this process's start) has passed. Requests under that highest epoch go
// at once. A resource whose highest is zero (never admitted) waits for
// nothing.
//
// It assumes the previous process ran with the same Timeout and
// BackendTimeout, and that this one started after the previous one ended.
type startup struct {
	guard *storageguard.Guard
	until time.Time // the end of the quarantine
	first sync.Map  // resource -> *firstSight
}

// firstSight is a resource's highest epoch as this process first read it.
type firstSight struct {
	once    sync.Once
	highest epoch.Epoch
	known   bool // false: the read failed; every epoch waits
}

func newStartup(g *storageguard.Guard, maxHold time.Duration) *startup {
	return &startup{guard: g, until: time.Now().Add(maxHold)}
}

// sight returns what must be waited for before a request for resource is
// forwarded, or nil once the quarantine is over. It must be called before
// the request's admission: the first call for a resource reads its highest
// epoch, and every other call for it waits for that read.
func (s *startup) sight(ctx context.Context, resource string) *firstSight {
	if s == nil || !time.Now().Before(s.until) {
		return nil
	}
	v, _ := s.first.LoadOrStore(resource, new(firstSight))
	f := v.(*firstSight)
	f.once.Do(func() {
		h, err := s.guard.Highest(context.WithoutCancel(ctx), resource)
		f.highest, f.known = h, err == nil
	})
	return f
}

// wait returns once a request admitted under ep may be forwarded: at once
// for the epoch that was highest at the first sight, or any epoch of a
// resource never admitted before, else at the end of the quarantine. It
// returns ctx's error if ctx ends first (nothing was forwarded).
func (s *startup) wait(ctx context.Context, f *firstSight, ep epoch.Epoch) error {
	if f == nil || (f.known && (f.highest.IsZero() || f.highest == ep)) {
		return nil
	}
	d := time.Until(s.until)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
