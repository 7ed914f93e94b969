package audit

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the tailers' series, labelled by cluster name only (a
// region's clusters, from its configuration: bounded).
type Metrics struct {
	lag    *prometheus.GaugeVec
	events *prometheus.CounterVec
	gaps   *prometheus.CounterVec
	fails  *prometheus.CounterVec

	mu    sync.Mutex
	heads map[string]int64
}

// NewMetrics registers the tailer series on reg (none when nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lockplane_audit_lag_revisions",
			Help: "Revisions the cluster has that the audit store does not yet."}, []string{"cluster"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lockplane_audit_events_total",
			Help: "Audit events stored."}, []string{"cluster"}),
		gaps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lockplane_audit_gaps_total",
			Help: "Ranges of revisions compacted before the tailer read them, each recorded as a gap event."}, []string{"cluster"}),
		fails: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lockplane_audit_store_failures_total",
			Help: "Batches the audit store refused (each is tried again)."}, []string{"cluster"}),
		heads: map[string]int64{},
	}
	if reg != nil {
		reg.MustRegister(m.lag, m.events, m.gaps, m.fails)
	}
	return m
}

func (m *Metrics) head(cluster string, rev int64) {
	m.mu.Lock()
	m.heads[cluster] = max(m.heads[cluster], rev)
	m.mu.Unlock()
}

func (m *Metrics) stored(cluster string, done int64, n int) {
	m.mu.Lock()
	h := max(m.heads[cluster], done)
	m.mu.Unlock()
	m.lag.WithLabelValues(cluster).Set(float64(h - done))
	m.events.WithLabelValues(cluster).Add(float64(n))
}

func (m *Metrics) gapped(cluster string)      { m.gaps.WithLabelValues(cluster).Inc() }
func (m *Metrics) storeFailed(cluster string) { m.fails.WithLabelValues(cluster).Inc() }
