package arbiter_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/internal/arbiter/quota"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// quotaOf limits one identity; every other identity is unlimited.
type quotaOf struct {
	path string
	lim  quota.Limits
}

func (q quotaOf) LimitsFor(id spiffeid.ID) quota.Limits {
	if id.Path() == q.path {
		return q.lim
	}
	return quota.Limits{}
}

func wantQuota(t *testing.T, err error, limit, quota string) {
	t.Helper()
	r, meta := reason.Info(err)
	if status.Code(err) != codes.ResourceExhausted || r != lockv1.ErrorReason_QUOTA_EXCEEDED ||
		meta["limit"] != limit || meta["quota"] != quota {
		t.Fatalf("error = %v (code %s, reason %s, metadata %v), want RESOURCE_EXHAUSTED QUOTA_EXCEEDED naming %s=%s",
			err, status.Code(err), r, meta, limit, quota)
	}
}

// Holds count across the coord cluster and both entity shards; a release
// or a close is counted before the next check.
func TestQuotasLimitAnIdentitysSessionsAndHoldsAcrossClusters(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{
		Classes: class.NewStatic(devenvtest.Fast, entity), Shards: []string{"a", "b"},
		Quotas: quotaOf{devenv.Identities["demo"], quota.Limits{Sessions: 2, Holds: 3}},
	})
	ctx := ctxT(t, time.Minute)
	demo := devenvtest.Client(t, env, "demo")
	s1 := devenvtest.Session(t, demo, entity.Name)
	// The default class's TTL is not entity's: a second lease.
	s2 := devenvtest.Session(t, demo, "")
	// A client keeps one lease per TTL, so the third comes from a second
	// client of the same identity.
	demo2 := devenvtest.Client(t, env, "demo")
	_, err := demo2.Session(ctx, entity.Name)
	wantQuota(t, err, "sessions", "2")
	// Another identity has its own (here unlimited) quota.
	other := devenvtest.Client(t, env, "other")
	for range 3 {
		devenvtest.Session(t, other, entity.Name)
	}

	var held []*lockclient.Hold
	for i := range 2 {
		h, err := s1.TryLock(ctx, fmt.Sprintf("team-a/quota-%d/1", i), noFence)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, h)
	}
	h, err := s2.TryLock(ctx, "team-b/quota-coord/1", noFence)
	if err != nil {
		t.Fatal(err)
	}
	held = append(held, h)
	_, err = s1.TryLock(ctx, "team-a/quota-9/1", noFence)
	wantQuota(t, err, "holds", "3")

	if err := held[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s1.TryLock(ctx, "team-a/quota-9/1", noFence); err != nil {
		t.Fatalf("after a release the identity is below its quota: %v", err)
	}
	if err := s2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := demo2.Session(ctx, devenvtest.Fast.Name); err != nil {
		t.Fatalf("after a close the identity is below its session quota: %v", err)
	}
}
