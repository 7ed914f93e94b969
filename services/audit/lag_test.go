package audit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/audit/audittest"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/prometheus/client_golang/prometheus"
)

// While the store refuses, the lag gauge follows the cluster's head, not
// the last batch stored: it grows with every write the store is missing,
// and the seconds-behind gauge with the time; both fall to 0 once the
// store has everything again.
func TestTheLagGrowsWhileTheStoreIsDown(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 30*time.Second)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "")
	store := audittest.New()
	reg := prometheus.NewRegistry()
	m := audit.NewMetrics(reg)
	tctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		audit.Run(tctx, audit.Config{Cluster: "coord", Etcd: env.Etcd, Store: store, Name: "t1",
			CheckpointEvery: 50 * time.Millisecond, Metrics: m})
	}()
	t.Cleanup(func() { cancel(); <-done })

	if v := awaitGauge(t, ctx, reg, "lockplane_audit_leading", func(v float64) bool { return v == 1 }); v != 1 {
		t.Fatal("never led")
	}
	want := grants(t, ctx, s, "up", 2)
	if err := store.Await(ctx, func(evs []audit.Event) bool { return len(granted(evs)) == len(want) }); err != nil {
		t.Fatal(err)
	}
	refused := store.FailNext(errors.New("clickhouse is down"))
	grants(t, ctx, s, "down", 3)
	if err := await(ctx, refused); err != nil {
		t.Fatal("the store was never asked while down")
	}
	// Three grants and releases are at least six revisions the store lacks.
	first := awaitGauge(t, ctx, reg, "lockplane_audit_lag_revisions", func(v float64) bool { return v >= 6 })
	grants(t, ctx, s, "still-down", 3)
	awaitGauge(t, ctx, reg, "lockplane_audit_lag_revisions", func(v float64) bool { return v >= first+6 })
	awaitGauge(t, ctx, reg, "lockplane_audit_lag_seconds", func(v float64) bool { return v > 0 })

	store.Heal()
	awaitGauge(t, ctx, reg, "lockplane_audit_lag_revisions", func(v float64) bool { return v == 0 })
	awaitGauge(t, ctx, reg, "lockplane_audit_lag_seconds", func(v float64) bool { return v == 0 })
	if v, err := gauge(reg, "lockplane_audit_leading", "coord"); err != nil || v != 1 {
		t.Fatalf("leading while tailing: %v, %v; want 1", v, err)
	}

	// Once it no longer leads, its lag is nobody's: gone, and leading 0.
	cancel()
	<-done
	if v, err := gauge(reg, "lockplane_audit_lag_revisions", "coord"); err == nil {
		t.Fatalf("the lag (%v) outlived the tailer's leadership", v)
	}
	if v, err := gauge(reg, "lockplane_audit_leading", "coord"); err != nil || v != 0 {
		t.Fatalf("leading after the tailer stopped: %v, %v; want 0", v, err)
	}
}

// awaitGauge returns the coord cluster's value of the gauge once ok holds
// of it. A gauge announces no change: it is read every 20 ms.
func awaitGauge(t *testing.T, ctx context.Context, reg *prometheus.Registry, name string, ok func(float64) bool) float64 {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	last := "no value"
	for {
		if v, err := gauge(reg, name, "coord"); err == nil {
			if ok(v) {
				return v
			}
			last = fmt.Sprint(v)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never reached the value wanted; last %s", name, last)
		case <-tick.C:
		}
	}
}

func gauge(reg *prometheus.Registry, name, cluster string) (float64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cluster" && l.GetValue() == cluster {
					return m.GetGauge().GetValue(), nil
				}
			}
		}
	}
	return 0, fmt.Errorf("no %s{cluster=%q}", name, cluster)
}
