package fencemetrics

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// Results are the values of the result label, in order.
var Results = []string{"admitted", "stale", "conflict", "foreign", "bad_signature", "malformed", "error"}

// Result classifies a fence's or a Guard's answer.
func Result(err error) string {
	switch {
	case err == nil:
		return "admitted"
	case errors.Is(err, storageguard.ErrStale):
		return "stale"
	case errors.Is(err, storageguard.ErrConflict):
		return "conflict"
	case errors.Is(err, storageguard.ErrForeignCluster):
		return "foreign"
	case errors.Is(err, storageguard.ErrUnauthenticated):
		return "bad_signature"
	case errors.Is(err, epoch.ErrMalformed), errors.Is(err, storageguard.ErrBadResource):
		return "malformed"
	}
	return "error"
}

// Metrics are the fence metrics of one registry.
type Metrics struct {
	decisions *prometheus.CounterVec
	raises    prometheus.Counter
	hold      prometheus.Histogram
}

// New registers the fence metrics with reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "termfence", Subsystem: "fence", Name: "decisions_total",
			Help: "Fence decisions by operation and result (admitted, or why an epoch or token was refused).",
		}, []string{"op", "result"}),
		raises: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "termfence", Subsystem: "fence", Name: "raises_total",
			Help: "Admissions that raised a resource's highest epoch (a new leader's first write).",
		}),
		hold: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "termfence", Subsystem: "fence", Name: "hold_seconds",
			Help:    "How long a write held the fence (Do's write function, Tx's transaction function).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}),
	}
	for _, op := range []string{"do", "tx", "admit", "check", "guard"} {
		for _, r := range Results {
			m.decisions.WithLabelValues(op, r) // every series present from the start
		}
	}
	for _, c := range []prometheus.Collector{m.decisions, m.raises, m.hold} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// MustNew is New that panics on error, for program start-up.
func MustNew(reg prometheus.Registerer) *Metrics {
	m, err := New(reg)
	if err != nil {
		panic(err)
	}
	return m
}

// Refused counts a Guard's refusal before the fence; give it as
// storageguard.GuardConfig.OnRefuse.
func (m *Metrics) Refused(_ string, err error) {
	m.decisions.WithLabelValues("guard", Result(err)).Inc()
}

// Wrap returns f with its decisions counted. The result is a plain
// storageguard.Fence: a fence's Tx method does not survive Wrap. For a fence
// with Tx (sqlfence, pgfence) use WrapTx, which keeps it and counts it.
func (m *Metrics) Wrap(f storageguard.Fence) storageguard.Fence {
	return m.wrap(f)
}

func (m *Metrics) wrap(f storageguard.Fence) *fence {
	return &fence{m: m, f: f, seen: make(map[string]uint64)}
}

// WrapTx is Wrap for a fence with Tx: the result keeps Tx, and counts its
// decisions (op "tx"), raises and hold time like Do's. Go cannot infer T
// from f's method, so name it: fencemetrics.WrapTx[*sql.Tx](m, sqlFence),
// fencemetrics.WrapTx[pgx.Tx](m, pgFence). A Guard built on the result
// reaches Tx through storageguard.Tx.
func WrapTx[T any](m *Metrics, f storageguard.TxFence[T]) storageguard.TxFence[T] {
	return &txFence[T]{fence: m.wrap(f), tx: f}
}

type txFence[T any] struct {
	*fence
	tx storageguard.TxFence[T]
}

var _ storageguard.TxFence[struct{}] = (*txFence[struct{}])(nil)

// Tx implements storageguard.TxFence. fn may run more than once (the
// fence retries); the decision is counted once, when Tx returns: admitted
// if fn ran and the error, if any, is not a refusal (fn's own error is not
// the fence's), else the refusal. A raise is counted only when the
// transaction committed.
func (w *txFence[T]) Tx(ctx context.Context, resource string, ep epoch.Epoch, fn func(T) error) error {
	w.before(ctx, resource)
	var (
		ran   bool
		start time.Time
	)
	err := w.tx.Tx(ctx, resource, ep, func(tx T) error {
		if !ran {
			ran, start = true, time.Now()
		}
		return fn(tx)
	})
	result := Result(err)
	if ran {
		w.m.hold.Observe(time.Since(start).Seconds())
		if result == "error" {
			result = "admitted"
		}
	}
	if err == nil {
		w.admitted(resource, ep)
	}
	w.m.decisions.WithLabelValues("tx", result).Inc()
	return err
}

type fence struct {
	m    *Metrics
	f    storageguard.Fence
	mu   sync.Mutex
	seen map[string]uint64 // resource -> highest term seen through this wrapper
}

var _ storageguard.Fence = (*fence)(nil)

// before reads the resource's highest term the first time it is seen.
func (w *fence) before(ctx context.Context, resource string) {
	w.mu.Lock()
	_, ok := w.seen[resource]
	w.mu.Unlock()
	if ok {
		return
	}
	if h, err := w.f.Highest(ctx, resource); err == nil {
		w.mu.Lock()
		if _, ok := w.seen[resource]; !ok {
			w.seen[resource] = h.Term
		}
		w.mu.Unlock()
	}
}

// admitted counts a raise if ep is above the highest term seen.
func (w *fence) admitted(resource string, ep epoch.Epoch) {
	w.mu.Lock()
	raised := ep.Term > w.seen[resource]
	if raised {
		w.seen[resource] = ep.Term
	}
	w.mu.Unlock()
	if raised {
		w.m.raises.Inc()
	}
}

func (w *fence) Do(ctx context.Context, resource string, ep epoch.Epoch, write func(ctx context.Context) error) error {
	w.before(ctx, resource)
	ran := false
	err := w.f.Do(ctx, resource, ep, func(ctx context.Context) error {
		ran = true
		w.admitted(resource, ep)
		start := time.Now()
		defer func() { w.m.hold.Observe(time.Since(start).Seconds()) }()
		return write(ctx)
	})
	if ran {
		w.m.decisions.WithLabelValues("do", "admitted").Inc() // the write's own error is not the fence's
	} else {
		w.m.decisions.WithLabelValues("do", Result(err)).Inc()
	}
	return err
}

func (w *fence) Admit(ctx context.Context, resource string, ep epoch.Epoch) error {
	w.before(ctx, resource)
	err := w.f.Admit(ctx, resource, ep)
	if err == nil {
		w.admitted(resource, ep)
	}
	w.m.decisions.WithLabelValues("admit", Result(err)).Inc()
	return err
}

func (w *fence) Check(ctx context.Context, resource string, ep epoch.Epoch) error {
	err := w.f.Check(ctx, resource, ep)
	w.m.decisions.WithLabelValues("check", Result(err)).Inc()
	return err
}

func (w *fence) Highest(ctx context.Context, resource string) (epoch.Epoch, error) {
	return w.f.Highest(ctx, resource)
}

func (w *fence) Close() error { return w.f.Close() }
