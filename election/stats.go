package election

import (
	"sync"
	"time"

	"github.com/termfence/termfence/transport"
)

// ConfirmBuckets are the upper bounds, in seconds, of Stats.ConfirmLatency's
// buckets.
var ConfirmBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// Stats are this node's monitoring figures since New: what package
// election/electionmetrics exports to Prometheus. Counters only grow.
type Stats struct {
	Term    uint64 // current Raft term
	Leading bool   // holds a confirmed epoch now

	// EpochsConfirmed counts the epochs this node confirmed (terms it won
	// and published); EpochsWithdrawn those it stopped handing out again.
	EpochsConfirmed, EpochsWithdrawn uint64

	// Leaderless is the total time this node knew no leader, the current
	// stretch included.
	Leaderless time.Duration

	// ConfirmLatency is the distribution of the time from Raft making this
	// node leader to the epoch of that term being published.
	ConfirmLatency Histogram

	// Admission is what the admission layer let through and refused.
	Admission AdmissionStats

	// Inbound counts what the Raft port did with inbound connections
	// (accepted, evicted, handshakes failed, idle ones closed, identity
	// claims refused) when the transport is one from transport.NewTCP
	// (InboundKnown); the in-memory transport has none.
	Inbound      transport.InboundStats
	InboundKnown bool
}

// Histogram is a distribution over ConfirmBuckets: Counts[i] is the number
// of observations at or below Bounds[i] (cumulative, as Prometheus wants).
type Histogram struct {
	Bounds []float64
	Counts []uint64
	Count  uint64
	Sum    float64 // seconds
}

// Stats returns this node's monitoring figures.
func (e *Election) Stats() Stats {
	s := Stats{Term: e.raft.CurrentTerm(), Admission: e.Admission()}
	s.Inbound, s.InboundKnown = transport.Inbound(e.cfg.Transport)
	_, s.Leading = e.held()
	s.Leaderless = e.clock.leaderless(time.Now())
	e.stats.mu.Lock()
	defer e.stats.mu.Unlock()
	s.EpochsConfirmed, s.EpochsWithdrawn = e.stats.confirmed, e.stats.withdrawn
	s.ConfirmLatency = Histogram{
		Bounds: append([]float64(nil), ConfirmBuckets...),
		Counts: append([]uint64(nil), e.stats.buckets...),
		Count:  e.stats.count, Sum: e.stats.sum,
	}
	return s
}

// statsRecorder holds the counters behind Stats.
type statsRecorder struct {
	mu                   sync.Mutex
	wonAt                time.Time // when raft last made this node leader
	confirmed, withdrawn uint64
	buckets              []uint64 // cumulative, per ConfirmBuckets
	count                uint64
	sum                  float64
}

func (r *statsRecorder) won(now time.Time) {
	r.mu.Lock()
	r.wonAt = now
	r.mu.Unlock()
}

func (r *statsRecorder) confirm(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.confirmed++
	if r.wonAt.IsZero() {
		return
	}
	d := now.Sub(r.wonAt).Seconds()
	if r.buckets == nil {
		r.buckets = make([]uint64, len(ConfirmBuckets))
	}
	for i, b := range ConfirmBuckets {
		if d <= b {
			r.buckets[i]++
		}
	}
	r.count++
	r.sum += d
	r.wonAt = time.Time{}
}

func (r *statsRecorder) withdraw() {
	r.mu.Lock()
	r.withdrawn++
	r.mu.Unlock()
}
