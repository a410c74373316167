package electionmetrics

import (
	"errors"
	"strings"
	"sync"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
	gmprom "github.com/hashicorp/go-metrics/compat/prometheus"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/termfence/termfence/election"
)

// Collector is a prometheus.Collector for one Election.
type Collector struct {
	el *election.Election

	leader, term, transitions, confirm, leaderless, admitted, refused *prometheus.Desc
	inOpen, inAccepted, inDropped                                     *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns the collector of el's metrics.
func NewCollector(el *election.Election) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName("termfence", "election", name), help, labels, nil)
	}
	t := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName("termfence", "transport", name), help, labels, nil)
	}
	return &Collector{
		el:          el,
		leader:      d("leader", "1 while this node holds a confirmed epoch (it is the leader and may act as one), else 0."),
		term:        d("term", "This node's current Raft term."),
		transitions: d("epoch_transitions_total", "Epochs this node confirmed (won and published) or withdrew (stepped down).", "transition"),
		confirm:     d("confirm_duration_seconds", "Time from Raft making this node leader to the epoch of that term being published."),
		leaderless:  d("leaderless_seconds_total", "Time this node knew no leader."),
		admitted:    d("admission_admitted_total", "Raft RPCs the admission layer handed to raft."),
		refused:     d("admission_refused_total", "Raft RPCs the admission layer refused, by reason.", "reason"),
		inOpen:      t("inbound_open", "Inbound Raft connections open now."),
		inAccepted:  t("inbound_accepted_total", "Inbound Raft connections accepted."),
		inDropped:   t("inbound_dropped_total", "Inbound Raft connections or RPCs the transport dropped, by reason: evicted (MaxInbound), handshake_failed, idle_closed, claim_refused (an RPC claiming another server than its certificate names).", "reason"),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.leader, c.term, c.transitions, c.confirm, c.leaderless, c.admitted, c.refused, c.inOpen, c.inAccepted, c.inDropped} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.el.Stats()
	leading := 0.0
	if s.Leading {
		leading = 1
	}
	ch <- prometheus.MustNewConstMetric(c.leader, prometheus.GaugeValue, leading)
	ch <- prometheus.MustNewConstMetric(c.term, prometheus.GaugeValue, float64(s.Term))
	ch <- prometheus.MustNewConstMetric(c.transitions, prometheus.CounterValue, float64(s.EpochsConfirmed), "confirmed")
	ch <- prometheus.MustNewConstMetric(c.transitions, prometheus.CounterValue, float64(s.EpochsWithdrawn), "withdrawn")
	buckets := make(map[float64]uint64, len(s.ConfirmLatency.Bounds))
	for i, b := range s.ConfirmLatency.Bounds {
		if i < len(s.ConfirmLatency.Counts) {
			buckets[b] = s.ConfirmLatency.Counts[i]
		} else {
			buckets[b] = 0
		}
	}
	ch <- prometheus.MustNewConstHistogram(c.confirm, s.ConfirmLatency.Count, s.ConfirmLatency.Sum, buckets)
	ch <- prometheus.MustNewConstMetric(c.leaderless, prometheus.CounterValue, s.Leaderless.Seconds())
	ch <- prometheus.MustNewConstMetric(c.admitted, prometheus.CounterValue, float64(s.Admission.Admitted))
	for reason, n := range s.Admission.Refused {
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(n), reasonLabel(reason.String()))
	}
	if in := s.Inbound; s.InboundKnown {
		ch <- prometheus.MustNewConstMetric(c.inOpen, prometheus.GaugeValue, float64(in.Open))
		ch <- prometheus.MustNewConstMetric(c.inAccepted, prometheus.CounterValue, float64(in.Accepted))
		for reason, n := range map[string]uint64{"evicted": in.Evicted, "handshake_failed": in.HandshakeFailed, "idle_closed": in.IdleClosed, "claim_refused": in.ClaimRefused} {
			ch <- prometheus.MustNewConstMetric(c.inDropped, prometheus.CounterValue, float64(n), reason)
		}
	}
}

// reasonLabel turns a refusal reason's name into a label value.
func reasonLabel(s string) string {
	return strings.ReplaceAll(strings.ToLower(s), " ", "_")
}

// Register registers el's collector with reg.
func Register(reg prometheus.Registerer, el *election.Election) error {
	return reg.Register(NewCollector(el))
}

// MustRegister is Register that panics on error, like
// prometheus.MustRegister: for program start-up.
func MustRegister(reg prometheus.Registerer, el *election.Election) {
	if err := Register(reg, el); err != nil {
		panic(err)
	}
}

// ErrRaftBridged is returned by RegisterRaft when raft's metrics are
// already bridged in this process.
var ErrRaftBridged = errors.New("electionmetrics: raft's metrics are already bridged in this process")

var bridged sync.Mutex
var bridgedDone bool

// RegisterRaft sends hashicorp/raft's own go-metrics (raft_state_leader,
// raft_commitTime, raft_rpc_..., from every raft in the process) to reg, with
// no hostname label and no runtime metrics. go-metrics has one global sink
// per process: a second call fails with ErrRaftBridged.
func RegisterRaft(reg prometheus.Registerer) error {
	bridged.Lock()
	defer bridged.Unlock()
	if bridgedDone {
		return ErrRaftBridged
	}
	sink, err := gmprom.NewPrometheusSinkFrom(gmprom.PrometheusOpts{
		Registerer: reg,
		Expiration: time.Minute,
		Name:       "termfence_raft_sink",
	})
	if err != nil {
		return err
	}
	cfg := gometrics.DefaultConfig("")
	cfg.EnableHostname = false
	cfg.EnableHostnameLabel = false
	cfg.EnableRuntimeMetrics = false
	cfg.EnableServiceLabel = false
	if _, err := gometrics.NewGlobal(cfg, sink); err != nil {
		reg.Unregister(sink)
		return err
	}
	bridgedDone = true
	return nil
}
