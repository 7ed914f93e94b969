package audit_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/audit/audittest"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The client-health series come from the history: a waited grant's wait,
// each hold's time, and an expiry without release counted against the
// namespace and class of the holder that stopped renewing, not against one
// that released.
func TestClientHealthSeriesComeFromTheHistory(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, time.Minute)
	reg := prometheus.NewRegistry()
	store := audittest.New()
	tctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		audit.Run(tctx, audit.Config{Cluster: "coord", Etcd: env.Etcd, Store: store, Name: "t1",
			CheckpointEvery: 50 * time.Millisecond, Metrics: audit.NewMetrics(reg)})
	}()
	t.Cleanup(func() { cancel(); <-done })

	// team-a: a hold released, and a grant that waited for it.
	a := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "")
	b := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "")
	h, err := a.Lock(ctx, "team-a/health/0", noFence)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		h2, err := b.Lock(ctx, "team-a/health/0", noFence)
		if err == nil {
			err = h2.Release(ctx)
		}
		got <- err
	}()
	awaitSample(t, ctx, env.Registry, "lockplane_waits_total", nil, func(v float64) bool { return v >= 1 })
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}

	// team-b: a holder that crashes, never renewing, never releasing.
	api := raw(devenvtest.Client(t, env, "demo"))
	sess, err := api.OpenSession(ctx, &lockv1.OpenSessionRequest{Class: devenvtest.Fast.Name, Instance: "crashed"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.Acquire(ctx, &lockv1.AcquireRequest{Key: "team-b/health/0", SessionId: sess.GetSessionId(), Class: devenvtest.Fast.Name, Instance: "crashed"}); err != nil {
		t.Fatal(err)
	}

	teamB := map[string]string{"namespace": "team-b", "class": devenvtest.Fast.Name, "cluster": "coord"}
	awaitSample(t, ctx, reg, "lockplane_expiries_total", teamB, func(v float64) bool { return v == 1 })
	awaitSample(t, ctx, reg, "lockplane_hold_seconds", teamB, func(v float64) bool { return v == 1 })
	teamA := map[string]string{"namespace": "team-a", "cluster": "coord"}
	awaitSample(t, ctx, reg, "lockplane_hold_seconds", teamA, func(v float64) bool { return v == 2 })
	awaitSample(t, ctx, reg, "lockplane_wait_seconds", teamA, func(v float64) bool { return v == 1 })
	// team-a's expiry counter exists, at 0: born with the namespace's
	// first grant, so that its first expiry is an increase Prometheus sees.
	if v, n := sample(reg, "lockplane_expiries_total", teamA); v != 0 || n == 0 {
		t.Fatalf("team-a released every hold: %v expiries over %d series, want 0 over one", v, n)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains([]string{"namespace", "class", "tier", "cluster"}, l.GetName()) {
					t.Errorf("%s has label %s", mf.GetName(), l.GetName())
				}
				// A session's own expiry is no hold's: counted, it would
				// be a series without namespace or class (Prometheus drops
				// empty labels), which no owner's route matches.
				if (l.GetName() == "namespace" || l.GetName() == "class") && l.GetValue() == "" {
					t.Errorf("%s has a series with an empty %s", mf.GetName(), l.GetName())
				}
			}
		}
	}
}

// sample is the sum over the series of name whose labels include want (a
// counter's or gauge's value, a histogram's count), and how many there are.
func sample(reg prometheus.Gatherer, name string, want map[string]string) (float64, int) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, 0
	}
	var sum float64
	n := 0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !hasLabels(m, want) {
				continue
			}
			n++
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			case m.Histogram != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum, n
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}

// awaitSample polls sample until ok: a scrape has no event to wait on.
func awaitSample(t *testing.T, ctx context.Context, reg prometheus.Gatherer, name string, want map[string]string, ok func(float64) bool) float64 {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	last := "no value"
	for {
		v, n := sample(reg, name, want)
		if n > 0 && ok(v) {
			return v
		}
		last = fmt.Sprintf("%v over %d series", v, n)
		select {
		case <-ctx.Done():
			t.Fatalf("%s%v: last %s", name, want, last)
		case <-tick.C:
		}
	}
}
