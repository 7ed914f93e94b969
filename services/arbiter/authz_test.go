package arbiter_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/policy"
	"github.com/lockplane/lockplane/services/reason"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/status"
)

const authzClasses = `apiVersion: lockplane.io/v1
kind: LockClass
metadata: {name: batch}
spec: {namespace: team-a, purpose: efficiency, enforcement: advisory, ttl: 30s, tier: coord}
---
apiVersion: lockplane.io/v1
kind: LockClass
metadata: {name: jobs}
spec: {namespace: team-b, purpose: efficiency, enforcement: advisory, ttl: 30s, tier: coord}
`

// demo may lock team-a/orders/; other (team-b's worker) all of team-b.
const authzGrants = `apiVersion: lockplane.io/v1
kind: LockGrant
metadata: {name: demo-orders}
spec: {spiffeId: "spiffe://lockplane.dev/ns/team-a/sa/demo", prefixes: [team-a/orders/]}
---
apiVersion: lockplane.io/v1
kind: LockGrant
metadata: {name: team-b-worker}
spec: {spiffeId: "spiffe://lockplane.dev/ns/team-b/sa/worker", prefixes: [team-b]}
`

func policyEnv(t testing.TB) (*devenv.Env, *policy.Live, string, *prometheus.Registry) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "policies")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "classes.yaml"), []byte(authzClasses), 0o644)
	os.WriteFile(filepath.Join(dir, "grants.yaml"), []byte(authzGrants), 0o644)
	reg := prometheus.NewRegistry()
	live, err := policy.NewLive(dir, slog.New(slog.DiscardHandler), reg)
	if err != nil {
		t.Fatal(err)
	}
	return devenvtest.Start(t, devenv.Options{Classes: live, Authorizer: live}), live, dir, reg
}

// A denial is one error, the same code and message whether the key is
// held, free or never existed, so a namespace learns nothing of another's
// keys (ADR-19).
func TestPrefixGrantsDenyUniformly(t *testing.T) {
	env, live, dir, reg := policyEnv(t)
	ctx := ctxT(t, 30*time.Second)
	demoClient := devenvtest.Client(t, env, "demo")
	demo := devenvtest.Session(t, demoClient, "batch")
	otherClient := devenvtest.Client(t, env, "other")
	other := devenvtest.Session(t, otherClient, "jobs")

	if _, err := demo.Lock(ctx, "team-a/orders/1", noFence); err != nil {
		t.Fatalf("a granted key: %v", err)
	}
	held, err := other.Lock(ctx, "team-b/x/held", noFence)
	if err != nil {
		t.Fatalf("team-b's worker on its own namespace: %v", err)
	}
	defer held.Release(ctx)

	// A class locks its own namespace's keys only.
	_, err = devenvtest.Session(t, otherClient, "batch").TryLock(ctx, "team-b/x/other", noFence)
	wantReason(t, err, lockv1.ErrorReason_INVALID_ARGUMENT)

	var denials []*status.Status
	for _, key := range []string{"team-b/x/held", "team-b/x/never-existed", "team-a/invoices/1", "team-a/orders"} {
		_, err := demo.TryLock(ctx, key, noFence)
		wantReason(t, err, lockv1.ErrorReason_PERMISSION_DENIED)
		st, _ := status.FromError(err)
		denials = append(denials, st)
		_, ierr := raw(demoClient).Inspect(ctx, &lockv1.InspectRequest{Key: key})
		wantReason(t, ierr, lockv1.ErrorReason_PERMISSION_DENIED)
	}
	for _, d := range denials[1:] {
		if d.Code() != denials[0].Code() || d.Message() != denials[0].Message() {
			t.Fatalf("denials differ: %v vs %v", d, denials[0])
		}
	}

	// An invalid set is refused; the last good one keeps serving.
	os.WriteFile(filepath.Join(dir, "grants.yaml"), []byte("apiVersion: lockplane.io/v1\nkind: LockGrant\nmetadata: {name: broken}\nspec: {spiffeId: nope}\n"), 0o644)
	if err := live.Reload(); err == nil {
		t.Fatal("an invalid reload was accepted")
	}
	if n, err := testutil.GatherAndCount(reg, "lockplane_policy_reload_failures_total"); err != nil || n != 1 || gauge(t, reg, "lockplane_policy_reload_failures_total") != 1 ||
		gauge(t, reg, "lockplane_policy_last_reload_valid") != 0 {
		t.Fatal("the refused reload is not in the metrics")
	}
	if _, err := demo.Lock(ctx, "team-a/orders/2", noFence); err != nil {
		t.Fatalf("after a refused reload the last good grants should serve: %v", err)
	}

	// A valid reload without demo's grant takes effect at once.
	_, teamB, _ := strings.Cut(authzGrants, "---\n")
	os.WriteFile(filepath.Join(dir, "grants.yaml"), []byte(teamB), 0o644)
	if err := live.Reload(); err != nil {
		t.Fatal(err)
	}
	_, err = demo.TryLock(ctx, "team-a/orders/3", noFence)
	wantReason(t, err, lockv1.ErrorReason_PERMISSION_DENIED)
}

// gauge reads a metric without labels from reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			m := f.GetMetric()[0]
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// BenchmarkDenialByKeyState times denied acquisitions of a held key and of
// a key that never existed, side by side (go test -run ^$ -bench
// DenialByKeyState ./services/arbiter): the check runs before any etcd
// read, so the two match within noise.
func BenchmarkDenialByKeyState(b *testing.B) {
	env, _, _, _ := policyEnv(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	other := devenvtest.Session(b, devenvtest.Client(b, env, "other"), "jobs")
	held, err := other.Lock(ctx, "team-b/x/held", noFence)
	if err != nil {
		b.Fatal(err)
	}
	defer held.Release(ctx)
	demo := devenvtest.Session(b, devenvtest.Client(b, env, "demo"), "batch")
	for _, key := range []string{"team-b/x/held", "team-b/x/never-existed"} {
		b.Run(filepath.Base(key), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := demo.TryLock(ctx, key, noFence); reason.Of(err) != lockv1.ErrorReason_PERMISSION_DENIED {
					b.Fatalf("not denied: %v", err)
				}
			}
		})
	}
}
