// Package metriclint is ADR-22's metric lint: every series Lockplane's
// binaries export (the arbiter with its audit tailers, and the snapshot
// job; the fan-in control plane exports none) carries only the allowed
// labels, and its count follows the policy set, never the traffic's keys,
// sessions or identities.
package metriclint_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockplane/lockplane/dr/snapshot"
	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/audit/audittest"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/metriclabels"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// ours are the families the lint holds to ADR-22; the Go runtime's and
// the process's (go_*, process_*) have fixed, bounded labels of their own.
func ours(name string) bool { return strings.HasPrefix(name, "lockplane_") }

// badLabels lists each of our families' labels outside the allowed four.
func badLabels(fams []*dto.MetricFamily) []string {
	var bad []string
	for _, f := range fams {
		if !ours(f.GetName()) {
			continue
		}
		seen := map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(metriclabels.Allowed, l.GetName()) && !seen[l.GetName()] {
					seen[l.GetName()] = true
					bad = append(bad, f.GetName()+"{"+l.GetName()+"}")
				}
			}
		}
	}
	return bad
}

// shape is a family's series: how many, and how many distinct label
// values other than the namespace's (class, tier, cluster).
type shape struct {
	series, others int
	byNamespace    bool
}

func shapes(fams []*dto.MetricFamily) map[string]shape {
	out := map[string]shape{}
	for _, f := range fams {
		if !ours(f.GetName()) {
			continue
		}
		others := map[string]bool{}
		s := shape{series: len(f.GetMetric())}
		for _, m := range f.GetMetric() {
			var rest []string
			for _, l := range m.GetLabel() {
				if l.GetName() == "namespace" {
					s.byNamespace = true
					continue
				}
				rest = append(rest, l.GetName()+"="+l.GetValue())
			}
			others[strings.Join(rest, ",")] = true
		}
		s.others = len(others)
		out[f.GetName()] = s
	}
	return out
}

// unbounded lists the families whose series grew with the traffic from
// half to full: past the namespace cap for a namespace-labelled family,
// by more than one series (a first failure, a first renewal) otherwise.
func unbounded(half, full map[string]shape) []string {
	var bad []string
	for name, f := range full {
		h := half[name]
		switch {
		case f.byNamespace && f.series > (metriclabels.MaxValues+1)*f.others:
			bad = append(bad, fmt.Sprintf("%s: %d series over %d label sets, past the namespace cap %d", name, f.series, f.others, metriclabels.MaxValues))
		case !f.byNamespace && f.series-h.series > 1:
			bad = append(bad, fmt.Sprintf("%s: %d series, then %d with twice the keys, sessions and identities", name, h.series, f.series))
		}
	}
	slices.Sort(bad)
	return bad
}

const (
	keys       = 10_000
	namespaces = 300
	workers    = 8
)

// Drive 10,000 keys over 300 namespaces, half of them (and half the
// sessions and identities) first, through an arbiter with its audit
// tailers, beside a snapshot job's series; then check every family.
func TestEverySeriesIsLabelledByTheFourAndBounded(t *testing.T) {
	// The tailers store into memory; nothing here reads audit history.
	env := devenvtest.Start(t, devenv.Options{Audit: struct {
		*audittest.Store
		audit.Reader
	}{Store: audittest.New()}, Workers: 2 * workers})
	snaps := prometheus.NewRegistry()
	snapshot.NewMetrics(snaps, "coord", time.Hour).Taken(snapshot.Manifest{TakenAt: time.Now(), Size: 1}, nil)
	gather := func() []*dto.MetricFamily {
		fams, err := prometheus.Gatherers{env, snaps}.Gather()
		if err != nil {
			t.Fatal(err)
		}
		return fams
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// Phase p locks keys in namespaces [p*150, p*150+150) as identities
	// of its own, each worker on a session of its own.
	phase := func(p int) {
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			s := devenvtest.Session(t, devenvtest.Client(t, env, fmt.Sprintf("worker-%d", p*workers+w)), "")
			wg.Go(func() {
				for i := w; i < keys/2; i += workers {
					key := fmt.Sprintf("ns-%d/k-%d", p*namespaces/2+i%(namespaces/2), p*keys/2+i)
					if err := lockRelease(ctx, s, key); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	phase(0)
	half := shapes(gather())
	phase(1)
	fams := gather()
	full := shapes(fams)
	t.Logf("%d keys over %d namespaces in %v: %d of our families, %d series (label cap %d)",
		keys, namespaces, time.Since(start).Round(time.Second), len(full), total(full), metriclabels.MaxValues)
	for _, want := range []string{"lockplane_grants_total", "lockplane_hold_seconds", "lockplane_snapshot_bytes"} {
		if full[want].series == 0 {
			t.Errorf("%s: no series; the traffic did not reach it", want)
		}
	}
	if bad := badLabels(fams); len(bad) > 0 {
		t.Errorf("labels outside %v: %v", metriclabels.Allowed, bad)
	}
	if bad := unbounded(half, full); len(bad) > 0 {
		t.Errorf("series that grow with the traffic:\n%s", strings.Join(bad, "\n"))
	}

	// The lint itself can fail: a collector labelled by key, and one whose
	// cluster label takes a value per key, are both caught.
	byKey := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lockplane_test_by_key"}, []string{"key"})
	perKey := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lockplane_test_per_key"}, []string{"cluster"})
	broken := prometheus.NewRegistry()
	broken.MustRegister(byKey, perKey)
	byKey.WithLabelValues("ns-1/k-1").Set(1)
	perKey.WithLabelValues("k-1").Set(1)
	bhalf := shapes(must(broken.Gather()))
	for i := range 10 {
		perKey.WithLabelValues(fmt.Sprint("k-", i)).Set(1)
	}
	bfams := must(broken.Gather())
	if bad := badLabels(bfams); len(bad) != 1 || bad[0] != "lockplane_test_by_key{key}" {
		t.Errorf("a key label: lint found %v", bad)
	}
	if bad := unbounded(bhalf, shapes(bfams)); len(bad) != 1 || !strings.HasPrefix(bad[0], "lockplane_test_per_key") {
		t.Errorf("a series per key: lint found %v", bad)
	}
}

func lockRelease(ctx context.Context, s *lockclient.Session, key string) error {
	h, err := s.TryLock(ctx, key, func(*lockclient.Hold) {})
	if err != nil {
		return fmt.Errorf("lock %s: %w", key, err)
	}
	return h.Release(ctx)
}

func total(s map[string]shape) (n int) {
	for _, f := range s {
		n += f.series
	}
	return n
}

func must(f []*dto.MetricFamily, err error) []*dto.MetricFamily {
	if err != nil {
		panic(err)
	}
	return f
}
