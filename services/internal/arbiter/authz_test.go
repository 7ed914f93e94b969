package arbiter_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/internal/arbiter"
	"github.com/lockplane/lockplane/services/policy/live"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
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
---
apiVersion: lockplane.io/v1
kind: LockClass
metadata: {name: records}
spec: {namespace: team-a, purpose: efficiency, enforcement: advisory, ttl: 30s, tier: entity, prefixes: [team-a/orders/records/]}
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

func policyEnv(t testing.TB) (*devenv.Env, *live.Policy, string, *prometheus.Registry) {
	t.Helper()
	live, dir, reg := livePolicy(t)
	return devenvtest.Start(t, devenv.Options{Classes: live, Authorizer: live}), live, dir, reg
}

// livePolicy is the tests' policy set, loaded from files in a directory.
func livePolicy(t testing.TB) (*live.Policy, string, *prometheus.Registry) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "policies")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "classes.yaml"), []byte(authzClasses), 0o644)
	os.WriteFile(filepath.Join(dir, "grants.yaml"), []byte(authzGrants), 0o644)
	reg := prometheus.NewRegistry()
	live, err := live.New(dir, slog.New(slog.DiscardHandler), reg)
	if err != nil {
		t.Fatal(err)
	}
	return live, dir, reg
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
// DenialByKeyState ./services/internal/arbiter): the check runs before any etcd
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

// countingAuthorizer counts the decisions asked of the policy.
type countingAuthorizer struct {
	arbiter.Authorizer
	asked atomic.Int64
}

func (c *countingAuthorizer) MayLock(id spiffeid.ID, key string) bool {
	c.asked.Add(1)
	return c.Authorizer.MayLock(id, key)
}

// Every lock RPC that names a key is refused for a key the policy does not
// grant the caller, on both tiers, whether an Arbiter serves alone or a
// Router fronts the coord cluster and the entity shards: then the Router
// authorises and the arbiters it forwards to trust it. Either way each
// call is authorised exactly once.
func TestEveryKeyCallIsAuthorisedOnceWithOrWithoutARouter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		shards []string
	}{{"arbiter", nil}, {"router", []string{"a", "b"}}} {
		t.Run(tc.name, func(t *testing.T) {
			live, _, _ := livePolicy(t)
			authz := &countingAuthorizer{Authorizer: live}
			env := devenvtest.Start(t, devenv.Options{Classes: live, Authorizer: authz, Shards: tc.shards})
			if routed := env.Router != nil; routed != (tc.shards != nil) {
				t.Fatalf("served by a Router: %v, want %v", routed, tc.shards != nil)
			}
			ctx := ctxT(t, time.Minute)
			demoClient := devenvtest.Client(t, env, "demo")
			demo, other := raw(demoClient), raw(devenvtest.Client(t, env, "other"))
			for _, cls := range []string{"batch", "records"} {
				s := devenvtest.Session(t, demoClient, cls)
				once := func(what string, call func() error) error {
					t.Helper()
					before := authz.asked.Load()
					err := call()
					if n := authz.asked.Load() - before; n != 1 {
						t.Fatalf("%s (%s): the policy was asked %d times, want once", what, cls, n)
					}
					return err
				}

				// A key the policy grants: held where its tier lives.
				granted := "team-a/orders/" + cls + "/1"
				var acq *lockv1.AcquireResponse
				if err := once("granted Acquire", func() (err error) {
					acq, err = demo.Acquire(ctx, &lockv1.AcquireRequest{Key: granted, Class: cls, SessionId: s.ID(), Instance: s.Instance()})
					return err
				}); err != nil {
					t.Fatalf("%s: %v", granted, err)
				}
				if on := heldOn(t, ctx, env, granted); len(on) != 1 || (tc.shards != nil && cls == "records") == (on[0] == "coord") {
					t.Fatalf("%s (%s) is held on %v", granted, cls, on)
				}
				if err := once("granted Inspect", func() error {
					_, err := demo.Inspect(ctx, &lockv1.InspectRequest{Key: granted, Class: cls})
					return err
				}); err != nil {
					t.Fatal(err)
				}
				if err := once("granted ValidateToken", func() error {
					_, err := demo.ValidateToken(ctx, &lockv1.ValidateTokenRequest{Key: granted, Class: cls, Token: acq.GetToken().GetValue()})
					return err
				}); err != nil {
					t.Fatal(err)
				}
				if err := once("granted Release", func() error {
					_, err := demo.Release(ctx, &lockv1.ReleaseRequest{Key: granted, Class: cls, SessionId: s.ID(), Token: acq.GetToken().GetValue()})
					return err
				}); err != nil {
					t.Fatal(err)
				}

				// Keys it does not: another prefix of the caller's namespace,
				// and another namespace.
				for _, key := range []string{"team-a/invoices/1", "team-b/x/1"} {
					calls := []struct {
						name string
						call func() error
					}{
						{"Acquire", func() error {
							_, err := demo.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Class: cls, SessionId: s.ID(), Instance: s.Instance()})
							return err
						}},
						{"waiting Acquire", func() error {
							_, err := demo.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Class: cls, SessionId: s.ID(), Instance: s.Instance(), Wait: true})
							return err
						}},
						{"Release", func() error {
							_, err := demo.Release(ctx, &lockv1.ReleaseRequest{Key: key, Class: cls, SessionId: s.ID(), Token: acq.GetToken().GetValue()})
							return err
						}},
						{"Release any_token", func() error {
							_, err := demo.Release(ctx, &lockv1.ReleaseRequest{Key: key, Class: cls, SessionId: s.ID(), AnyToken: true})
							return err
						}},
						{"Inspect", func() error {
							_, err := demo.Inspect(ctx, &lockv1.InspectRequest{Key: key, Class: cls})
							return err
						}},
						{"ValidateToken", func() error {
							_, err := demo.ValidateToken(ctx, &lockv1.ValidateTokenRequest{Key: key, Class: cls, Token: acq.GetToken().GetValue()})
							return err
						}},
					}
					for _, c := range calls {
						err := once(c.name+" "+key, c.call)
						if reason.Of(err) != lockv1.ErrorReason_PERMISSION_DENIED {
							t.Fatalf("%s %s (%s): %v, want PERMISSION_DENIED", c.name, key, cls, err)
						}
					}
				}

				// Session calls name no key: another identity is refused the
				// session itself.
				if _, err := other.CloseSession(ctx, &lockv1.CloseSessionRequest{SessionId: s.ID()}); reason.Of(err) != lockv1.ErrorReason_SESSION_NOT_OWNED {
					t.Fatalf("CloseSession of another identity's session: %v, want SESSION_NOT_OWNED", err)
				}
				ka, err := other.KeepAlive(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := ka.Send(&lockv1.KeepAliveRequest{SessionId: s.ID()}); err != nil {
					t.Fatal(err)
				}
				if resp, err := ka.Recv(); err != nil || resp.GetError() != lockv1.ErrorReason_SESSION_NOT_OWNED {
					t.Fatalf("KeepAlive of another identity's session: %v (err %v), want SESSION_NOT_OWNED", resp, err)
				}
				ka.CloseSend()
			}
		})
	}
}
