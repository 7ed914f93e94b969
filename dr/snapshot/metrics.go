package snapshot

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are a snapshot job's series, labelled by cluster only (a
// region's clusters: bounded).
type Metrics struct {
	lastSuccess, bytes prometheus.Gauge
	failures           prometheus.Counter
	last               float64 // lastSuccess's value; the job calls from one goroutine
}

// NewMetrics registers the series of cluster's job, which snapshots every
// period, on reg.
func NewMetrics(reg prometheus.Registerer, cluster string, every time.Duration) *Metrics {
	labels := prometheus.Labels{"cluster": cluster}
	m := &Metrics{
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Name: "lockplane_snapshot_last_success_timestamp_seconds", ConstLabels: labels,
			Help: "When the cluster's last snapshot was stored in the snapshot store, as this instance knows it: the one it took, or the one recorded when it was elected (Unix seconds; 0 until it leads). Only the elected instance takes them: alert on the age of max by (cluster)."}),
		bytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "lockplane_snapshot_bytes", ConstLabels: labels,
			Help: "The size of the last snapshot stored."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "lockplane_snapshot_failures_total", ConstLabels: labels,
			Help: "Snapshots that could not be taken or stored."}),
	}
	period := prometheus.NewGauge(prometheus.GaugeOpts{Name: "lockplane_snapshot_period_seconds", ConstLabels: labels,
		Help: "How often the job snapshots (--every): an alert compares the last success's age with it."})
	period.Set(every.Seconds())
	reg.MustRegister(m.lastSuccess, m.bytes, m.failures, period)
	return m
}

// Recorded notes the cluster's last recorded snapshot: Job.Recorded.
func (m *Metrics) Recorded(last time.Time) {
	if v := float64(last.Unix()); v > m.last {
		m.last = v
		m.lastSuccess.Set(v)
	}
}

// Taken records one attempt's outcome: Job.Taken.
func (m *Metrics) Taken(got Manifest, err error) {
	if err != nil {
		m.failures.Inc()
		return
	}
	m.last = float64(got.TakenAt.Unix())
	m.lastSuccess.Set(m.last)
	m.bytes.Set(float64(got.Size))
}
