package arbiter

import (
	"context"
	"strings"
	"sync"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/lockplane/lockplane/services/metriclabels"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// AllowedLabels are the only metric labels the arbiter may use (ADR-22):
// never a key, a session or a token.
var AllowedLabels = metriclabels.Allowed

type labels struct{ namespace, class, tier, cluster string }

// namespace is ns's label value: itself while the cap allows.
func (m *metrics) namespace(ns string) string { return m.namespaces.Label(ns) }

func (l labels) values() []string { return []string{l.namespace, l.class, l.tier, l.cluster} }

type metrics struct {
	grantSeconds   *prometheus.HistogramVec
	serviceSeconds *prometheus.HistogramVec
	grants         *prometheus.CounterVec
	releases       *prometheus.CounterVec
	sessionsOpened *prometheus.CounterVec
	renewals       *prometheus.CounterVec
	renewalsFailed *prometheus.CounterVec
	attempts       *prometheus.CounterVec
	waits          *prometheus.CounterVec
	waiting        *prometheus.GaugeVec
	handoffs       *prometheus.CounterVec
	validations    *prometheus.CounterVec
	// One counter family per refusal reason: a reason label would be a
	// fifth label, which ADR-22 does not allow.
	refusals   map[lockv1.ErrorReason]*prometheus.CounterVec
	live       *liveCollector
	namespaces metriclabels.Values
}

// warnings are the settings a server exports as 1-or-0 gauges so that a
// deployment running with one is never silent (besides a log line at start).
type warnings struct {
	// authorizationOpen: any workload of the trust domain may lock any key.
	authorizationOpen bool
	// etcdAuthOff: the clients sign in to etcd as no user.
	etcdAuthOff bool
}

// warningGauge is a constant gauge, 1 when on.
func warningGauge(name, help string, on bool) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	if on {
		g.Set(1)
	}
	return g
}

// newMetrics makes the metrics and registers them with reg, if any.
func newMetrics(reg prometheus.Registerer, warn warnings) (*metrics, error) {
	m := &metrics{
		grantSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lockplane_grant_seconds", Help: "Time from Acquire to grant, including any wait.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, AllowedLabels),
		serviceSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lockplane_grant_service_seconds", Help: "Time from Acquire to grant less any wait for the key: the arbiter's and etcd's own time, which the grant latency SLO bounds.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, AllowedLabels),
		grants:         prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lockplane_grants_total", Help: "Grants made."}, AllowedLabels),
		releases:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lockplane_releases_total", Help: "Holds released by their holder."}, AllowedLabels),
		sessionsOpened: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lockplane_sessions_opened_total", Help: "Sessions opened."}, AllowedLabels),
		// By cluster only: a renewal names a session, whose class the
		// arbiter does not read to renew it.
		renewals:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lockplane_renewals_total", Help: "Keepalives (lease renewals) the cluster confirmed, answered with a TTL."}, []string{"cluster"}),
		renewalsFailed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lockplane_renewals_failed_total", Help: "Keepalives no quorum confirmed."}, []string{"cluster"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lockplane_grant_attempts_total",
			Help: "Grant transactions sent to etcd; attempts per grant is the contention cost."}, AllowedLabels),
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lockplane_waits_total",
			Help: "Times a waiting Acquire found the key held and began waiting."}, AllowedLabels),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lockplane_waiting",
			Help: "Acquires waiting on this arbiter for a held key now: a queue whose callers wait while its class grants nothing is stalled."}, AllowedLabels),
		handoffs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lockplane_handoffs_total",
			Help: "Grants made by the release Txn of the previous holder, to the head waiter."}, AllowedLabels),
		validations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lockplane_validations_total",
			Help: "ValidateToken calls: resources that depend on the lock service on their write path."}, AllowedLabels),
		refusals: map[lockv1.ErrorReason]*prometheus.CounterVec{},
		live:     &liveCollector{},
	}
	authOpen := warningGauge("lockplane_authorization_open",
		"1 when the arbiter runs without an authorizer (--allow-any-workload): any workload of the trust domain may lock any key.", warn.authorizationOpen)
	authOff := warningGauge("lockplane_etcd_auth_off",
		"1 when the arbiter signs in to etcd as no user (--etcd-without-auth): etcd does not keep the lock path, the Admin API and the tailers apart.", warn.etcdAuthOff)
	cs := []prometheus.Collector{authOpen, authOff, m.grantSeconds, m.serviceSeconds, m.grants, m.releases, m.sessionsOpened, m.renewals, m.renewalsFailed, m.attempts, m.waits, m.waiting, m.handoffs, m.validations, m.live}
	for v, name := range lockv1.ErrorReason_name {
		if v == 0 {
			continue
		}
		c := prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockplane_refusals_" + strings.ToLower(name) + "_total",
			Help: "Requests refused with reason " + name + ".",
		}, AllowedLabels)
		m.refusals[lockv1.ErrorReason(v)] = c
		cs = append(cs, c)
	}
	if reg != nil {
		for _, c := range cs {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// granted counts a grant d after its Acquire began, waited of it spent
// waiting for the key.
func (m *metrics) granted(l labels, d, waited time.Duration) {
	m.grants.WithLabelValues(l.values()...).Inc()
	m.grantSeconds.WithLabelValues(l.values()...).Observe(d.Seconds())
	m.serviceSeconds.WithLabelValues(l.values()...).Observe(max(d-waited, 0).Seconds())
}

func (m *metrics) attempted(l labels) { m.attempts.WithLabelValues(l.values()...).Inc() }
func (m *metrics) handedOff(l labels) { m.handoffs.WithLabelValues(l.values()...).Inc() }

func (m *metrics) validated(l labels) { m.validations.WithLabelValues(l.values()...).Inc() }

func (m *metrics) waited(l labels) { m.waits.WithLabelValues(l.values()...).Inc() }

// waitBegan counts a wait that has begun until the returned end is called.
func (m *metrics) waitBegan(l labels) (end func()) {
	g := m.waiting.WithLabelValues(l.values()...)
	g.Inc()
	return g.Dec
}

func (m *metrics) released(l labels) { m.releases.WithLabelValues(l.values()...).Inc() }

func (m *metrics) sessionOpened(l labels) { m.sessionsOpened.WithLabelValues(l.values()...).Inc() }

func (m *metrics) renewed(cluster string) { m.renewals.WithLabelValues(cluster).Inc() }

func (m *metrics) renewalFailed(cluster string) { m.renewalsFailed.WithLabelValues(cluster).Inc() }

// admitted makes the series an alert watches for a first increment
// (NO_QUORUM refusals) at 0 for l, when l is first seen: a counter born
// at its first increment shows Prometheus no increase.
func (m *metrics) admitted(l labels) {
	m.refusals[lockv1.ErrorReason_NO_QUORUM].WithLabelValues(l.values()...)
}

func (m *metrics) refused(l labels, r lockv1.ErrorReason) {
	if c, ok := m.refusals[r]; ok {
		c.WithLabelValues(l.values()...).Inc()
	}
}

// liveCollector counts live sessions and holds in etcd at scrape time, so
// the figures include expiries no arbiter saw.
// Each arbiter given the metrics adds itself: a Router's are all here.
type liveCollector struct {
	mu sync.Mutex
	as []*Arbiter
}

func (c *liveCollector) add(a *Arbiter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a.metrics.renewalsFailed.WithLabelValues(a.cfg.Cluster) // born at 0: see admitted
	c.as = append(c.as, a)
}

var (
	sessionsDesc = prometheus.NewDesc("lockplane_sessions", "Live session leases in the cluster: on an entity shard, the leases of coord sessions that hold there.", []string{"cluster"}, nil)
	holdsDesc    = prometheus.NewDesc("lockplane_holds", "Live holds in the cluster.", []string{"cluster"}, nil)
	sealedDesc   = prometheus.NewDesc("lockplane_cluster_sealed",
		"1 while the cluster is sealed (restored, rebuilt empty, or its epoch record lost: no grant until two operators advance its epoch), 0 while it grants; absent while the arbiter cannot tell (no quorum).", []string{"cluster"}, nil)
)

func (c *liveCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sessionsDesc
	ch <- holdsDesc
	ch <- sealedDesc
}

// Collect reads every cluster at once: a Router's clusters without quorum
// then cost one OpTimeout, not one each, within the scrape's timeout.
func (c *liveCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	as := c.as
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, a := range as {
		wg.Go(func() { c.collect(a, ch) })
	}
	wg.Wait()
}

func (c *liveCollector) collect(a *Arbiter, ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.OpTimeout)
	defer cancel()
	for _, x := range []struct {
		desc   *prometheus.Desc
		prefix string
	}{{sessionsDesc, lockkey.SessionPrefix}, {holdsDesc, lockkey.HoldPrefix}} {
		resp, err := a.etcd.Get(ctx, x.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithSerializable())
		if err != nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(x.desc, prometheus.GaugeValue, float64(resp.Count), a.cfg.Cluster)
	}
	// The grant path's own answer: the cached record, read again when
	// the cache has none.
	_, err := a.epochFor(ctx)
	switch {
	case err == nil:
		ch <- prometheus.MustNewConstMetric(sealedDesc, prometheus.GaugeValue, 0, a.cfg.Cluster)
	case reason.Of(err) == lockv1.ErrorReason_SEALED:
		ch <- prometheus.MustNewConstMetric(sealedDesc, prometheus.GaugeValue, 1, a.cfg.Cluster)
	}
}
