package arbiter_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/audit/audittest"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
)

// The log says how every hold ended, with nothing written beside it: the
// audit tailer tells a grant, a handoff, a release, a session close and a
// lease expiry apart from etcd's revisions alone.
func TestTheLogTellsHowEveryHoldEnded(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 60*time.Second)
	store := audittest.New()
	tctx, stop := context.WithCancel(ctx)
	tailed := make(chan error, 1)
	go func() {
		tailed <- audit.Run(tctx, audit.Config{Cluster: "coord", Etcd: env.Etcd, Store: store, Name: "t1"})
	}()
	t.Cleanup(func() { stop(); <-tailed })

	a := devenvtest.Client(t, env, "demo")
	sa := devenvtest.Session(t, a, "")
	b := devenvtest.Client(t, env, "other")
	sb := devenvtest.Session(t, b, "")

	// Granted and released.
	h, err := sa.Lock(ctx, "team-a/audit/released", noFence)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Handed from a to a waiting b, which releases.
	h, err = sa.Lock(ctx, "team-a/audit/handed", noFence)
	if err != nil {
		t.Fatal(err)
	}
	queued := queuedOn(t, env)
	got := make(chan error, 1)
	go func() {
		hb, err := sb.Lock(ctx, "team-a/audit/handed", noFence)
		if err == nil {
			err = hb.Release(ctx)
		}
		got <- err
	}()
	awaitQueued(t, ctx, queued, "team-a/audit/handed")
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// Held when its session is closed.
	if _, err := sb.Lock(ctx, "team-a/audit/closed", noFence); err != nil {
		t.Fatal(err)
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Held by a session nobody renews: its lease expires at etcd.
	api := raw(a)
	s, err := api.OpenSession(ctx, &lockv1.OpenSessionRequest{Class: devenvtest.Fast.Name, Instance: "gone"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.Acquire(ctx, &lockv1.AcquireRequest{Key: "team-a/audit/expired", SessionId: s.GetSessionId(), Class: devenvtest.Fast.Name, Instance: "gone"}); err != nil {
		t.Fatal(err)
	}

	want := map[string][]audit.Kind{
		"team-a/audit/released": {audit.Grant, audit.Release},
		"team-a/audit/handed":   {audit.Grant, audit.Handoff, audit.Release},
		"team-a/audit/closed":   {audit.Grant, audit.SessionClose},
		"team-a/audit/expired":  {audit.Grant, audit.Expiry},
	}
	err = store.Await(ctx, func(evs []audit.Event) bool {
		for key, kinds := range want {
			if !slices.Equal(audittest.Kinds(audittest.Of(evs, key)), kinds) {
				return false
			}
		}
		return true
	})
	evs := store.Events()
	if err != nil {
		for key, kinds := range want {
			if got := audittest.Kinds(audittest.Of(evs, key)); !slices.Equal(got, kinds) {
				t.Errorf("%s: %v, want %v", key, got, kinds)
			}
		}
		t.FailNow()
	}
	handed := audittest.Of(evs, "team-a/audit/handed")[1]
	if handed.PrevSession != sa.ID() || handed.Session != sb.ID() || handed.PrevIdentity == handed.Identity {
		t.Errorf("handoff %+v: want from session %d to %d, across identities", handed, sa.ID(), sb.ID())
	}
	expired := audittest.Of(evs, "team-a/audit/expired")[1]
	if expired.Instance != "gone" || expired.Class != devenvtest.Fast.Name || expired.Namespace != "team-a" || expired.Session != s.GetSessionId() {
		t.Errorf("expiry %+v: want the holder's instance, class, namespace and session", expired)
	}
	for _, e := range evs {
		if e.ClusterID == "" || e.Epoch == 0 || e.Revision == 0 {
			t.Errorf("event %+v lacks its cluster ID, epoch or revision", e)
		}
	}
}
