// Package live is the policy set an arbiter serves, reloaded in place:
// the arbiter's side of package policy, which only validates.
package live

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lockplane/lockplane/services/class"
	"github.com/lockplane/lockplane/services/internal/arbiter/admin"
	"github.com/lockplane/lockplane/services/internal/arbiter/quota"
	"github.com/lockplane/lockplane/services/policy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// Policy is the policy set an arbiter serves: its classes and its compiled
// grants, swapped whole on a valid reload. An invalid reload keeps the
// last good set, and says so in the log and the metrics (ADR-24: serve
// from the last good set).
type Policy struct {
	dir     string
	now     func() time.Time
	current atomic.Pointer[compiled]
	log     *slog.Logger

	reloads, failures prometheus.Counter
	valid             prometheus.Gauge
}

type compiled struct {
	set      *policy.Set
	registry class.Static
	grants   *policy.Grants
	quotas   map[string]policy.Quota
}

// New loads dir; a set invalid at start is an error, since there is no
// last good set to keep.
func New(dir string, log *slog.Logger, reg prometheus.Registerer) (*Policy, error) {
	l := &Policy{dir: dir, now: time.Now, log: log,
		reloads:  prometheus.NewCounter(prometheus.CounterOpts{Name: "lockplane_policy_reloads_total", Help: "Policy reloads attempted."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "lockplane_policy_reload_failures_total", Help: "Policy reloads refused as invalid; the last good set kept serving."}),
		valid:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "lockplane_policy_last_reload_valid", Help: "1 if the last policy reload was valid, 0 if the arbiter serves an older set."}),
	}
	if reg != nil {
		reg.MustRegister(l.reloads, l.failures, l.valid)
	}
	if err := l.Reload(); err != nil {
		return nil, err
	}
	return l, nil
}

// Reload loads the directory again. On error the serving set is unchanged.
func (l *Policy) Reload() error {
	l.reloads.Inc()
	set, err := policy.Load(l.dir, l.now())
	if err != nil {
		l.failures.Inc()
		l.valid.Set(0)
		if l.current.Load() != nil {
			l.log.Error("policy reload refused; serving the last good set", "dir", l.dir, "err", err)
		}
		return err
	}
	if cur := l.current.Load(); cur != nil {
		if moved := class.Rehomed(cur.registry, set.Registry()); len(moved) > 0 {
			err := fmt.Errorf("policy: keys under %s would move to another tier: a rehome, not an edit: the serving set stays; lockctl policy check --previous refuses such a change in review", strings.Join(moved, ", "))
			l.failures.Inc()
			l.valid.Set(0)
			l.log.Error("policy reload refused; serving the last good set", "dir", l.dir, "err", err)
			return err
		}
	}
	l.current.Store(&compiled{set: set, registry: set.Registry(), grants: policy.Compile(set.Grants), quotas: set.Quotas()})
	l.valid.Set(1)
	l.log.Info("policy loaded", "dir", l.dir, "classes", len(set.Classes), "grants", len(set.Grants))
	return nil
}

// Watch reloads every interval and whenever hup receives, until ctx ends.
func (l *Policy) Watch(ctx context.Context, interval time.Duration, hup <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-hup:
		}
		l.Reload()
	}
}

// Set is the serving set.
func (l *Policy) Set() *policy.Set { return l.current.Load().set }

// Lookup implements class.Registry.
func (l *Policy) Lookup(name string) (class.Class, error) {
	return l.current.Load().registry.Lookup(name)
}

// ForKey implements class.Registry.
func (l *Policy) ForKey(key, name string) (class.Class, error) {
	return l.current.Load().registry.ForKey(key, name)
}

// Placement is where the serving set puts keys (class.Placement). A
// reload that would change it is refused (a rehome), so it is the same for
// the life of l: the arbiter compares it with its clusters' epoch records.
func (l *Policy) Placement() string {
	return class.Placement(l.current.Load().registry)
}

// MayLock implements the arbiter's Authorizer.
func (l *Policy) MayLock(id spiffeid.ID, key string) bool {
	return l.current.Load().grants.MayLock(id, key)
}

// LimitsFor implements the arbiter's Quotas (quota.Quotas).
func (l *Policy) LimitsFor(id spiffeid.ID) quota.Limits {
	q, ok := l.current.Load().quotas[id.String()]
	if !ok {
		q = policy.DefaultQuota
	}
	return quota.Limits{Sessions: q.Sessions, Holds: q.Holds}
}

// RegionOf implements the arbiter's Homes: "" for a namespace homed
// nowhere in particular.
func (l *Policy) RegionOf(namespace string) string {
	return l.current.Load().set.Regions[namespace]
}

// ClassFacts implements the Admin API's ClassFacts: the register's view of
// every class of the serving set.
func (l *Policy) ClassFacts() []admin.ClassFact {
	set := l.Set()
	out := make([]admin.ClassFact, 0, len(set.Classes))
	for _, c := range set.Classes {
		out = append(out, admin.ClassFact{Name: c.Name, Namespace: c.Spec.Namespace, Enforcement: c.Spec.Enforcement,
			Purpose: c.Spec.Purpose, RiskOwner: c.Spec.RiskOwner, WaiverExpires: c.WaiverExpires})
	}
	return out
}
