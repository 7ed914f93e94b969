package arbiter_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
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

// series counts every metric sample a registry exposes.
func series(t *testing.T, reg *prometheus.Registry) int {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fams {
		n += len(f.GetMetric())
	}
	return n
}

// renewOnce renews s on a stream of its own and waits for the answer.
func renewOnce(t *testing.T, ctx context.Context, c *lockclient.Client, s *lockclient.Session) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ka, err := raw(c).KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ka.Send(&lockv1.KeepAliveRequest{SessionId: s.ID()}); err != nil {
		t.Fatal(err)
	}
	resp, err := ka.Recv()
	if err != nil || resp.GetError() != lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
		t.Fatalf("renew: %v %v", resp.GetError(), err)
	}
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
	// The session's first renewal mints the renewals series whenever it
	// comes; one renewal now puts it in the base count.
	renewOnce(t, ctx, c, s)
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
		base, half, namespaces/2, full, namespaces, arbiter.MaxNamespaceLabels, halfLim, fullLim, arbiter.MaxLimiters,
		(int64(m1.HeapAlloc)-int64(m0.HeapAlloc))/1024)
	// Past the cap the count is flat: the validations counter gains at most
	// one series per labelled namespace plus "(other)", denials one in all.
	if full != half {
		t.Errorf("series grew from %d to %d over the second %d namespaces: not flat", half, full, namespaces/2)
	}
	if full-base > arbiter.MaxNamespaceLabels+2 {
		t.Errorf("series grew by %d over %d namespaces; at most %d expected", full-base, namespaces, arbiter.MaxNamespaceLabels+2)
	}
	if halfLim > arbiter.MaxLimiters || fullLim > arbiter.MaxLimiters {
		t.Errorf("limiters %d then %d, over the cap %d", halfLim, fullLim, arbiter.MaxLimiters)
	}
	if m1.HeapAlloc > m0.HeapAlloc+64<<20 {
		t.Errorf("heap grew %d MiB", (m1.HeapAlloc-m0.HeapAlloc)>>20)
	}
}
