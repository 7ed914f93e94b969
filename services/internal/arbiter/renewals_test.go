package arbiter_test

import (
	"testing"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
)

// Every keepalive the cluster confirms is counted in
// lockplane_renewals_total, by cluster only: the cost report's keepalives
// are an estimate from the log, this is the count.
func TestRenewalsAreCountedByCluster(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 30*time.Second)
	// A session of the raw API: no client renews it behind the test's back.
	api := raw(devenvtest.Client(t, env, "demo"))
	s, err := api.OpenSession(ctx, &lockv1.OpenSessionRequest{Class: devenvtest.Fast.Name})
	if err != nil {
		t.Fatal(err)
	}
	before := renewals(t, env)
	ka, err := api.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := ka.Send(&lockv1.KeepAliveRequest{SessionId: s.GetSessionId()}); err != nil {
			t.Fatal(err)
		}
		if r, err := ka.Recv(); err != nil || r.GetError() != lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
			t.Fatalf("renewal: %v, %v", r, err)
		}
	}
	// A renewal of a session that is gone is no renewal.
	if err := ka.Send(&lockv1.KeepAliveRequest{SessionId: 12345}); err != nil {
		t.Fatal(err)
	}
	if r, err := ka.Recv(); err != nil || r.GetError() == lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
		t.Fatalf("renewal of no session: %v, %v", r, err)
	}
	ka.CloseSend()
	if got := renewals(t, env) - before; got != 3 {
		t.Fatalf("lockplane_renewals_total grew by %v, want 3", got)
	}
}

// renewals is lockplane_renewals_total (env has the coord cluster only),
// checking that its one label is the cluster.
func renewals(t *testing.T, env *devenv.Env) float64 {
	t.Helper()
	fams, err := env.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if bad := labelViolations(fams); len(bad) > 0 {
		t.Fatalf("labels outside the allowed: %v", bad)
	}
	n := 0.0
	for _, f := range fams {
		if f.GetName() != "lockplane_renewals_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if l := m.GetLabel(); len(l) != 1 || l[0].GetName() != "cluster" {
				t.Fatalf("lockplane_renewals_total has labels %v, want cluster only", l)
			}
			n += m.GetCounter().GetValue()
		}
	}
	return n
}
