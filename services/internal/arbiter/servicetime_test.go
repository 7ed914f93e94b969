package arbiter_test

import (
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/prometheus/client_golang/prometheus"
)

// A grant's service time leaves out its wait for the key: the SLO bounds
// the arbiter's and etcd's time, not how long another holder kept the key.
// While it waits, the wait is counted as waiting.
func TestServiceTimeLeavesOutTheWait(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 30*time.Second)
	a := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "")
	b := devenvtest.Session(t, devenvtest.Client(t, env, "other"), "")
	h, err := a.Lock(ctx, "team-a/service/0", noFence)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		h2, err := b.Lock(ctx, "team-a/service/0", noFence)
		if err == nil {
			err = h2.Release(ctx)
		}
		got <- err
	}()
	for histSum(t, env.Registry, "lockplane_waits_total") < 1 {
		select {
		case <-ctx.Done():
			t.Fatal("the second Acquire never waited")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if v := histSum(t, env.Registry, "lockplane_waiting"); v != 1 {
		t.Fatalf("lockplane_waiting %v while one Acquire waits, want 1", v)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if v := histSum(t, env.Registry, "lockplane_waiting"); v != 0 {
		t.Fatalf("lockplane_waiting %v after the wait ended, want 0", v)
	}
	// The counters an alert watches for a first increment exist at 0.
	for _, name := range []string{"lockplane_refusals_no_quorum_total", "lockplane_renewals_failed_total"} {
		if n := series(t, env.Registry)[name]; n == 0 {
			t.Errorf("%s has no series before its first increment", name)
		}
	}
	total, service := histSum(t, env.Registry, "lockplane_grant_seconds"), histSum(t, env.Registry, "lockplane_grant_service_seconds")
	if service <= 0 || service >= total {
		t.Fatalf("grant seconds %v, service seconds %v: want the waited grant's wait left out of the service time", total, service)
	}
}

// histSum is the sum of every sample of name: a histogram's sum, a
// counter's or a gauge's value.
func histSum(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			sum += m.GetHistogram().GetSampleSum() + m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}
