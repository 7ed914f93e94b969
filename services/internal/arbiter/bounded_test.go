package arbiter_test

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/internal/arbiter"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// denyPrefix refuses keys whose namespace starts with "deny-".
type denyPrefix struct{}

func (denyPrefix) MayLock(_ spiffeid.ID, key string) bool { return !strings.HasPrefix(key, "deny-") }

// series counts the metric samples a registry exposes, by family.
func series(t *testing.T, reg *prometheus.Registry) map[string]int {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, f := range fams {
		n[f.GetName()] = len(f.GetMetric())
	}
	return n
}

func total(n map[string]int) (sum int) {
	for _, v := range n {
		sum += v
	}
	return sum
}

// Callers name namespaces: 10,000 of them validated (authorised) and
// 10,000 denied must not mint a metric series or a limiter each. Series
// stop growing at the namespace label cap; the limiter map holds only
// namespaces active within a refill period, at most MaxLimiters.
func TestManyNamespacesKeepSeriesAndLimitersBounded(t *testing.T) {
	const namespaces = 10_000
	env := devenvtest.Start(t, devenv.Options{Authorizer: denyPrefix{}, ValidateRate: 200, ValidateBurst: 50})
	ctx := ctxT(t, 5*time.Minute)
	c := devenvtest.Client(t, env, "other")
	s := devenvtest.Session(t, c, "")
	tk, _ := token.Mint(1, 1)
	run := func(from, to int) {
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for w := range 8 {
			wg.Go(func() {
				for i := from + w; i < to; i += 8 {
					if _, err := raw(c).ValidateToken(ctx, &lockv1.ValidateTokenRequest{Key: fmt.Sprintf("ns-%d/k", i), Token: uint64(tk)}); err != nil {
						errs <- fmt.Errorf("validate in ns-%d: %w", i, err)
						return
					}
					_, err := raw(c).Acquire(ctx, &lockv1.AcquireRequest{Key: fmt.Sprintf("deny-%d/k", i), SessionId: s.ID(), Instance: s.Instance()})
					if code := fmt.Sprint(err); !strings.Contains(code, "PermissionDenied") {
						errs <- fmt.Errorf("acquire in deny-%d: %v, want PERMISSION_DENIED", i, err)
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
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	base := series(t, env.Registry)
	run(0, namespaces/2)
	half, halfLim := series(t, env.Registry), arbiter.ValidateLimiters(env.Arbiter)
	run(namespaces/2, namespaces)
	full, fullLim := series(t, env.Registry), arbiter.ValidateLimiters(env.Arbiter)
	runtime.GC()
	runtime.ReadMemStats(&m1)
	t.Logf("series: %d before, %d after %d namespaces, %d after %d (label cap %d); limiters: %d, then %d (cap %d); heap %+d KiB",
		total(base), total(half), namespaces/2, total(full), namespaces, arbiter.MaxNamespaceLabels, halfLim, fullLim, arbiter.MaxLimiters,
		(int64(m1.HeapAlloc)-int64(m0.HeapAlloc))/1024)
	// The validations counter gains at most one series per labelled
	// namespace plus "(other)", and is flat past the cap. Every other
	// family gains one series at most, whenever it comes (denials; the
	// session's first renewal, or failed one): a family labelled by the
	// caller's namespace would gain hundreds.
	const validations = "lockplane_validations_total"
	if full[validations] > arbiter.MaxNamespaceLabels+1 || full[validations] != half[validations] {
		t.Errorf("%s: %d series after %d namespaces, %d after %d; at most %d, flat past the cap",
			validations, half[validations], namespaces/2, full[validations], namespaces, arbiter.MaxNamespaceLabels+1)
	}
	for name, n := range full {
		if name != validations && (n-base[name] > 1 || n-half[name] > 1) {
			t.Errorf("%s: %d series before, %d after %d namespaces, %d after %d; at most one more expected",
				name, base[name], half[name], namespaces/2, n, namespaces)
		}
	}
	if halfLim > arbiter.MaxLimiters || fullLim > arbiter.MaxLimiters {
		t.Errorf("limiters %d then %d, over the cap %d", halfLim, fullLim, arbiter.MaxLimiters)
	}
	if m1.HeapAlloc > m0.HeapAlloc+64<<20 {
		t.Errorf("heap grew %d MiB", (m1.HeapAlloc-m0.HeapAlloc)>>20)
	}
}
