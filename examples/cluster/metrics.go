package main

import (
	"github.com/prometheus/client_golang/prometheus"
)

// nodeMetrics are the node's Prometheus metrics, on a registry of its own
// (GET /metrics).
type nodeMetrics struct {
	reg            *prometheus.Registry
	leaderChanges  prometheus.Counter
	epochsIssued   prometheus.Counter
	writesAccepted prometheus.Counter
	writesRefused  prometheus.Counter
	writeErrors    prometheus.Counter
}

// newNodeMetrics registers the node's metrics. term and leading are read at
// scrape time.
func newNodeMetrics(id string, term func() float64, leading func() float64) *nodeMetrics {
	reg := prometheus.NewRegistry()
	labels := prometheus.Labels{"node": id}
	m := &nodeMetrics{
		reg: reg,
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "termfence_leader_changes_total", ConstLabels: labels,
			Help: "Times this node saw the cluster's leader change to another known leader.",
		}),
		epochsIssued: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "termfence_epochs_issued_total", ConstLabels: labels,
			Help: "Epochs this node took: terms it won and confirmed as leader.",
		}),
		writesAccepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "termfence_store_writes_accepted_total", ConstLabels: labels,
			Help: "Writes this node sent to the store that the store accepted.",
		}),
		writesRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "termfence_store_writes_refused_total", ConstLabels: labels,
			Help: "Writes this node sent to the store that the store refused (stale, conflicting, forged or unsigned epoch).",
		}),
		writeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "termfence_store_write_errors_total", ConstLabels: labels,
			Help: "Writes this node could not get an answer to from the store.",
		}),
	}
	reg.MustRegister(m.leaderChanges, m.epochsIssued, m.writesAccepted, m.writesRefused, m.writeErrors,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "termfence_raft_term", ConstLabels: labels,
			Help: "This node's current Raft term.",
		}, term),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "termfence_leader", ConstLabels: labels,
			Help: "1 while this node holds a confirmed epoch, else 0.",
		}, leading),
	)
	return m
}
