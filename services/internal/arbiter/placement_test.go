package arbiter_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/internal/arbiter"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// recordsOnCoord is records rehomed: the same prefix, on the coord tier.
var recordsOnCoord = class.Class{Name: "records", TTL: 3 * time.Second, Tier: class.TierCoord, Prefixes: []string{"team-a/records/"}}

// routerWith serves another Router over env's clusters with the given
// classes, as an arbiter restarted with another policy set does while the
// others still serve the old one; it returns its address.
func routerWith(t *testing.T, env *devenv.Env, classes class.Static) string {
	t.Helper()
	return serveRouter(t, env, func(cfg *arbiter.RouterConfig) {
		cfg.Classes, cfg.OnePersonEpochAdvance = classes, true
		cfg.IsOperator = arbiter.OperatorPathPrefix(spiffeid.RequireTrustDomainFromString(devenv.TrustDomain), "/operator/")
	})
}

// dialAs is a client of the arbiter at addr as the named identity.
func dialAs(t *testing.T, env *devenv.Env, addr, as string) *lockclient.Client {
	t.Helper()
	id, err := env.Profile.Source(as)
	if err != nil {
		t.Fatal(err)
	}
	c, err := lockclient.Dial(lockclient.Config{Target: addr, Identity: id, ServerID: env.Profile.ServerID})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// An arbiter restarted with a policy set that rehomes team-a/records/ from
// entity to coord, while the other arbiters still serve the old set, is
// refused PLACEMENT_MISMATCH: the clusters' epoch records name the old
// set's placement. The key stays held once, on its shard. Before, the
// restarted arbiter granted it on coord: two holders, incomparable tokens.
func TestAnArbiterWithAnotherPlacementGrantsNothing(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{Classes: class.NewStatic(devenvtest.Fast, records), Shards: []string{"a"}})
	ctx := ctxT(t, time.Minute)
	const key = "team-a/records/1"
	holder := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), records.Name)
	if _, err := holder.TryLock(ctx, key, noFence); err != nil {
		t.Fatal(err)
	}
	api := raw(dialAs(t, env, routerWith(t, env, class.NewStatic(devenvtest.Fast, recordsOnCoord)), "other"))
	s, err := api.OpenSession(ctx, &lockv1.OpenSessionRequest{Class: records.Name})
	if err != nil {
		t.Fatal(err)
	}
	_, err = api.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Class: records.Name, SessionId: s.GetSessionId()})
	if on := heldOn(t, ctx, env, key); len(on) != 1 || on[0] != "a" {
		t.Fatalf("%s is held on %v, want shard a only (acquire: %v)", key, on, err)
	}
	wantReason(t, err, lockv1.ErrorReason_PLACEMENT_MISMATCH)
	// Every cluster's record names the placement of the set it is served
	// under.
	want := class.Placement(class.NewStatic(devenvtest.Fast, records))
	for name, cl := range map[string]clientv3.KV{"coord": env.Etcd, "a": env.ShardEtcd["a"]} {
		st, _, err := epoch.Read(ctx, cl)
		if err != nil || st.Placement != want {
			t.Fatalf("cluster %s: record placement %q (%v), want %q", name, st.Placement, err, want)
		}
	}
}

// A rehome is an epoch advance of every cluster by an arbiter running the
// new set, the clusters the keys leave first (docs/epochs.md): the advance
// deletes every hold and stamps the new placement, so the arbiters still
// on the old set grant nothing, and the key is granted on its new tier
// only.
func TestAnEpochAdvanceRehomesKeys(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{Classes: class.NewStatic(devenvtest.Fast, records), Shards: []string{"a"}})
	ctx := ctxT(t, time.Minute)
	const key = "team-a/records/1"
	holder := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), records.Name)
	if _, err := holder.TryLock(ctx, key, noFence); err != nil {
		t.Fatal(err)
	}
	addr := routerWith(t, env, class.NewStatic(devenvtest.Fast, recordsOnCoord))
	admin := adminv1.NewAdminServiceClient(dialAs(t, env, addr, "alice").Conn())
	for _, cluster := range []string{"a", "coord"} {
		st, err := admin.Status(ctx, &adminv1.StatusRequest{Cluster: cluster})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.AdvanceEpoch(ctx, &adminv1.AdvanceEpochRequest{Cluster: cluster, ExpectedEpoch: st.GetEpoch(), Reason: "test: rehome team-a/records/"}); err != nil {
			t.Fatalf("advance %s: %v", cluster, err)
		}
	}
	// The old set's arbiter grants nothing now, on any tier.
	old := raw(devenvtest.Client(t, env, "demo"))
	s, err := old.OpenSession(ctx, &lockv1.OpenSessionRequest{Class: records.Name})
	if err != nil {
		t.Fatal(err)
	}
	_, err = old.Acquire(ctx, &lockv1.AcquireRequest{Key: key, SessionId: s.GetSessionId()})
	wantReason(t, err, lockv1.ErrorReason_PLACEMENT_MISMATCH)
	// The new set's grants it on coord once the advance's quiet period,
	// which the old holder's session makes, is over.
	api := raw(dialAs(t, env, addr, "other"))
	for {
		s, err := api.OpenSession(ctx, &lockv1.OpenSessionRequest{Class: records.Name})
		if err != nil {
			t.Fatal(err)
		}
		_, err = api.Acquire(ctx, &lockv1.AcquireRequest{Key: key, SessionId: s.GetSessionId()})
		if r, meta := reason.Info(err); r == lockv1.ErrorReason_EPOCH_CHANGED && meta["retry_after"] != "" {
			wait, _ := time.ParseDuration(meta["retry_after"])
			time.Sleep(wait) // the quiet period the arbiter names: no event ends it
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	if on := heldOn(t, ctx, env, key); len(on) != 1 || on[0] != "coord" {
		t.Fatalf("%s is held on %v, want coord only", key, on)
	}
}

// A shard added to the map takes its sources' placement with its first
// epoch: it serves their keys as they place them, never the placement of
// whichever arbiter happens to load its record first.
func TestAnAddedShardTakesItsSourcesPlacement(t *testing.T) {
	env := sharded(t, []string{"a", "b"}, []string{"a"})
	ctx := ctxT(t, time.Minute)
	admin := adminv1.NewAdminServiceClient(devenvtest.Client(t, env, "alice").Conn())
	stream, err := admin.AddShard(ctx, &adminv1.AddShardRequest{Shard: "b", Reason: "test: add b"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := stream.Recv(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("add shard b: %v", err)
		}
	}
	want := class.Placement(class.NewStatic(devenvtest.Fast, entity))
	st, _, err := epoch.Read(ctx, env.ShardEtcd["b"])
	if err != nil || st.Placement != want {
		t.Fatalf("shard b's record: placement %q (%v), want its source's %q", st.Placement, err, want)
	}
}
