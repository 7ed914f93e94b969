package audit

import (
	"sync"
	"time"

	"github.com/lockplane/lockplane/services/metriclabels"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the tailers' series. The progress series are labelled by
// cluster name only (a region's clusters, from its configuration:
// bounded). The client-health series (ADR-22: waits, hold times, expiries
// without release, force-releases) come from the history itself, so they
// count every hold whichever arbiter granted it, and the expiries no
// arbiter sees; they carry namespace, class and cluster, the namespace and
// class values capped (services/metriclabels). A tailer that reads a range
// of revisions again after a restart counts it again, in its new process
// (in the same process, it does not).
//
// The lag gauges compare the cluster's head, as the leading tailer last
// saw it (every watch response's header, and a read of its own every
// checkpoint interval, whatever the store does), with the revision the
// store has. So they grow while the store refuses or the tailer is stuck,
// rather than keeping the last batch's figure. A tailer that stops leading
// (deposed, or stopped) removes its cluster's series: the leader's are the
// only ones. A tailer that fails keeps them, frozen, until it leads again.
type Metrics struct {
	lag     *prometheus.GaugeVec
	seconds *prometheus.GaugeVec
	leading *prometheus.GaugeVec
	pending *prometheus.GaugeVec
	events  *prometheus.CounterVec
	gaps    *prometheus.CounterVec
	fails   *prometheus.CounterVec

	waitSeconds *prometheus.HistogramVec
	holdSeconds *prometheus.HistogramVec
	expiries    *prometheus.CounterVec
	forced      *prometheus.CounterVec
	namespaces  metriclabels.Values
	classes     metriclabels.Values

	mu       sync.Mutex
	clusters map[string]*position
	peaks    map[string]int64 // the most events pending at once, per cluster
	// counted is, per cluster, the last revision the client-health series
	// counted: a tailer deposed and elected again in this process reads
	// from its checkpoint again, and must not count those holds twice.
	counted map[string]int64
}

// position is how far one cluster's store is behind its head.
type position struct {
	head, done int64
	// seen are heads beyond done, oldest first, each with when the tailer
	// first knew of it: the oldest is how long the store has been missing
	// a revision. Sightings less than a second apart share an entry (its
	// time the first's), so they are bounded by the seconds behind.
	seen []sighting
}

type sighting struct {
	rev int64
	at  time.Time
}

// maxSightings bounds a cluster's sightings; past it the newest entry
// takes on later heads, which can only overstate the seconds behind.
const maxSightings = 4096

// NewMetrics registers the tailer series on reg (none when nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lockplane_audit_lag_revisions",
			Help: "Revisions the cluster has that the audit store does not yet: the head the tailer last saw minus the last revision stored."}, []string{"cluster"}),
		seconds: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lockplane_audit_lag_seconds",
			Help: "How long the audit store has been missing its oldest missing revision, from when the tailer first saw it (1 s resolution); 0 when it has every revision seen."}, []string{"cluster"}),
		leading: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lockplane_audit_leading",
			Help: "1 while this process's tailer of the cluster leads (is the one writing its history), 0 while it waits or campaigns again; alert when no process of the region has 1."}, []string{"cluster"}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lockplane_audit_pending_events",
			Help: "Events the tailer has read and not yet stored: at most its bound (MaxPendingEvents) and one watch response."}, []string{"cluster"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lockplane_audit_events_total",
			Help: "Audit events stored."}, []string{"cluster"}),
		gaps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lockplane_audit_gaps_total",
			Help: "Ranges of revisions compacted before the tailer read them, each recorded as a gap event."}, []string{"cluster"}),
		fails: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lockplane_audit_store_failures_total",
			Help: "Batches the audit store refused (each is tried again)."}, []string{"cluster"}),
		waitSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "lockplane_wait_seconds",
			Help:    "How long a grant's request waited for its key, from queue join to grant (grants that waited only), from the hold record.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12)}, healthLabels),
		holdSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "lockplane_hold_seconds",
			Help:    "How long a hold lasted, from its grant to its end (release, session close, expiry or force-release), as the tailer read the end.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 12)}, healthLabels),
		expiries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lockplane_expiries_total",
			Help: "Holds ended by their session's expiry, not by Release or a session close: a holder that stopped renewing (ADR-22's client-health signal)."}, healthLabels),
		forced: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lockplane_force_releases_total",
			Help: "Holds ended by a two-person force-release."}, healthLabels),
		clusters: map[string]*position{},
		peaks:    map[string]int64{},
		counted:  map[string]int64{},
	}
	if reg != nil {
		reg.MustRegister(m.lag, m.seconds, m.leading, m.pending, m.events, m.gaps, m.fails, m.waitSeconds, m.holdSeconds, m.expiries, m.forced)
	}
	return m
}

// pos is cluster's position; m.mu is held.
func (m *Metrics) pos(cluster string) *position {
	p := m.clusters[cluster]
	if p == nil {
		p = &position{}
		m.clusters[cluster] = p
	}
	return p
}

// start records where a leading tailer starts: the store has done, and
// no head is known yet (a cluster rebuilt under a new ID has a new one).
func (m *Metrics) start(cluster string, done int64) {
	// Born at 0, so that its first gap is an increase Prometheus sees.
	m.gaps.WithLabelValues(cluster)
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pos(cluster)
	*p = position{head: done, done: done}
	m.publish(cluster, p, time.Now())
}

// head records that the cluster has reached rev.
func (m *Metrics) head(cluster string, rev int64) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pos(cluster)
	if rev <= p.head {
		return
	}
	p.head = rev
	if rev > p.done {
		if n := len(p.seen); n > 0 && (n >= maxSightings || now.Sub(p.seen[n-1].at) < time.Second) {
			p.seen[n-1].rev = rev
		} else {
			p.seen = append(p.seen, sighting{rev: rev, at: now})
		}
	}
	m.publish(cluster, p, now)
}

// healthLabels are the client-health series' labels: no tier, which the
// history does not record.
var healthLabels = []string{"namespace", "class", "cluster"}

// stored records that the store has every revision to done, and events
// more.
func (m *Metrics) stored(cluster string, done int64, events []Event) {
	m.mu.Lock()
	p := m.pos(cluster)
	p.done = max(p.done, done)
	m.publish(cluster, p, time.Now())
	m.mu.Unlock()
	m.events.WithLabelValues(cluster).Add(float64(len(events)))
	m.mu.Lock()
	from := m.counted[cluster]
	for _, e := range events {
		if e.Revision > from {
			m.counted[cluster] = max(m.counted[cluster], e.Revision)
		}
	}
	m.mu.Unlock()
	for _, e := range events {
		if e.Revision > from {
			m.health(e)
		}
	}
}

// health counts one stored event in the client-health series: holds
// only (a session's own end is an event of the same kinds, keyless).
func (m *Metrics) health(e Event) {
	if e.Key == "" {
		return
	}
	l := m.labels(e)
	switch e.Kind {
	case Grant, Handoff:
		if e.WaitedMs > 0 {
			m.waitSeconds.WithLabelValues(l...).Observe(float64(e.WaitedMs) / 1000)
		}
		// The end counters are born at 0 with the namespace and class's
		// first grant: a counter born at its first increment shows
		// Prometheus no increase.
		m.expiries.WithLabelValues(l...)
		m.forced.WithLabelValues(l...)
		if e.Kind == Grant {
			return
		}
		// A handoff also ends the previous hold, which is counted in its
		// own class.
		l = []string{l[0], m.classes.Label(e.heldClass), l[2]}
	case Release, SessionClose, Expiry, ForceRelease:
	default:
		return
	}
	if !e.heldSince.IsZero() {
		// The arbiter's clock at grant against the tailer's at the read
		// (or, for a handoff, the next grant's): a clock behind counts
		// nothing, not a negative hold.
		m.holdSeconds.WithLabelValues(l...).Observe(max(e.At.Sub(e.heldSince).Seconds(), 0))
	}
	switch e.Kind {
	case Expiry:
		m.expiries.WithLabelValues(l...).Inc()
	case ForceRelease:
		m.forced.WithLabelValues(l...).Inc()
	}
}

func (m *Metrics) labels(e Event) []string {
	return []string{m.namespaces.Label(e.Namespace), m.classes.Label(e.Class), e.Cluster}
}

// refresh sets the gauges again: the seconds behind grow with time alone.
func (m *Metrics) refresh(cluster string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.publish(cluster, m.pos(cluster), time.Now())
}

// lead records whether this process's tailer of cluster leads.
func (m *Metrics) lead(cluster string, leading bool) {
	v := 0.0
	if leading {
		v = 1
	}
	m.leading.WithLabelValues(cluster).Set(v)
}

// forget removes the cluster's lag gauges: this process no longer leads it.
func (m *Metrics) forget(cluster string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.clusters, cluster)
	m.lag.DeleteLabelValues(cluster)
	m.seconds.DeleteLabelValues(cluster)
	m.pending.DeleteLabelValues(cluster)
}

// held records that the tailer holds n events read and not yet stored.
func (m *Metrics) held(cluster string, n int64) {
	m.mu.Lock()
	m.peaks[cluster] = max(m.peaks[cluster], n)
	m.mu.Unlock()
	m.pending.WithLabelValues(cluster).Set(float64(n))
}

// PendingPeak is the most events the cluster's tailers in this process
// have held at once, read and not yet stored, since it started: what a
// catch-up cost, for benchmarks and tests.
func (m *Metrics) PendingPeak(cluster string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peaks[cluster]
}

// publish sets cluster's gauges from p; m.mu is held.
func (m *Metrics) publish(cluster string, p *position, now time.Time) {
	i := 0
	for i < len(p.seen) && p.seen[i].rev <= p.done {
		i++
	}
	p.seen = p.seen[i:]
	behind := 0.0
	if len(p.seen) > 0 {
		behind = now.Sub(p.seen[0].at).Seconds()
	}
	m.lag.WithLabelValues(cluster).Set(float64(max(p.head-p.done, 0)))
	m.seconds.WithLabelValues(cluster).Set(behind)
}

func (m *Metrics) gapped(cluster string)      { m.gaps.WithLabelValues(cluster).Inc() }
func (m *Metrics) storeFailed(cluster string) { m.fails.WithLabelValues(cluster).Inc() }
