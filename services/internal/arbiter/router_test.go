package arbiter_test

import (
	"context"
	"fmt"
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
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/lockplane/lockplane/services/shardmap"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// entity is the tests' entity-tier class: team-a's keys are its keys,
// every other namespace's live on coord.
var entity = class.Class{Name: "entity", TTL: 3 * time.Second, Tier: class.TierEntity, Prefixes: []string{"team-a/"}}

// sharded starts a coord cluster and entity shards as real embedded etcd
// clusters behind a Router; initial are map version 1's shards.
func sharded(t *testing.T, shards, initial []string) *devenv.Env {
	return devenvtest.Start(t, devenv.Options{
		Classes: class.NewStatic(devenvtest.Fast, entity), Shards: shards, InitialShards: initial,
	})
}

// heldOn reports which clusters of env hold key: "coord" and shard names.
func heldOn(t *testing.T, ctx context.Context, env *devenv.Env, key string) []string {
	t.Helper()
	var on []string
	clusters := map[string]*clientv3.Client{"coord": env.Etcd}
	for name, cl := range env.ShardEtcd {
		clusters[name] = cl
	}
	for name, cl := range clusters {
		resp, err := cl.Get(ctx, lockkey.HoldKey(key))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) > 0 {
			on = append(on, name)
		}
	}
	return on
}

func TestEntityKeysLiveOnTheShardTheMapHomesThemTo(t *testing.T) {
	env := sharded(t, []string{"a", "b"}, nil)
	ctx := ctxT(t, time.Minute)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), entity.Name)
	m, _, _, err := shardmap.Load(ctx, env.Etcd)
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]int{}
	for i := range 16 {
		key := fmt.Sprintf("team-a/range-%d/1", i)
		if _, err := s.TryLock(ctx, key, noFence); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		on := heldOn(t, ctx, env, key)
		if want := m.Home(key); len(on) != 1 || on[0] != want {
			t.Fatalf("%s is held on %v; the map homes it to [%s] only", key, on, want)
		}
		used[on[0]]++
	}
	if len(used) != 2 {
		t.Fatalf("16 ranges all landed on one shard: %v", used)
	}
	// A coord class's key stays on the coord cluster.
	c := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), devenvtest.Fast.Name)
	if _, err := c.TryLock(ctx, "team-b/range-0/1", noFence); err != nil {
		t.Fatal(err)
	}
	if on := heldOn(t, ctx, env, "team-b/range-0/1"); len(on) != 1 || on[0] != "coord" {
		t.Fatalf("a coord class's key is held on %v, want coord", on)
	}
	t.Logf("16 ranges over 2 shards: %v", used)
}

func TestASessionAcrossShardsIsRenewedAndClosedEverywhere(t *testing.T) {
	env := sharded(t, []string{"a", "b"}, nil)
	ctx := ctxT(t, time.Minute)
	m, _, _, _ := shardmap.Load(ctx, env.Etcd)
	keys := map[string]string{} // shard -> a key homed there
	for i := 0; len(keys) < 2; i++ {
		key := fmt.Sprintf("team-a/span-%d/1", i)
		keys[m.Home(key)] = key
	}
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), entity.Name)
	for _, key := range keys {
		if _, err := s.TryLock(ctx, key, noFence); err != nil {
			t.Fatal(err)
		}
	}
	// Inspect names the session the caller knows, not its shard lease.
	for _, key := range keys {
		in, err := devenvtest.Client(t, env, "other").Inspect(ctx, key, entity.Name)
		if err != nil || in.GetHolder().GetSessionId() != s.ID() {
			t.Fatalf("inspect %s: holder session %d (err %v), want %d", key, in.GetHolder().GetSessionId(), err, s.ID())
		}
	}
	// Outlive two TTLs: only renewals of every shard lease keep the holds.
	// The wait is the property under test, not synchronisation.
	time.Sleep(2 * entity.TTL)
	for shard, key := range keys {
		if on := heldOn(t, ctx, env, key); len(on) != 1 || on[0] != shard {
			t.Fatalf("after two TTLs %s is held on %v, want [%s]: the shard lease was not renewed", key, on, shard)
		}
	}
	// Not CanStart: one slow keepalive makes it false until the next answer.
	if left := s.RemainingTTL(); left <= 0 {
		t.Fatal("the session was fenced while every cluster had quorum")
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, key := range keys {
		if on := heldOn(t, ctx, env, key); len(on) != 0 {
			t.Fatalf("after CloseSession %s is still held on %v", key, on)
		}
	}
}

// Behind a Router, on the entity tier, replicas contend and a leak is
// named as on the coord cluster: two clients of one identity (two
// instances) get CONTENDED and queue; a second session of the process
// that holds the key is LEAKED, naming the session the process knows, not
// its lease on the shard.
func TestARouterTellsALeakFromAReplicaOnTheEntityTier(t *testing.T) {
	env := sharded(t, []string{"a"}, nil)
	ctx := ctxT(t, time.Minute)
	const key = "team-a/leak-entity/1"

	// As users meet it: two clients of one identity, one key.
	s1 := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), entity.Name)
	s2 := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), entity.Name)
	h, err := s1.TryLock(ctx, key, noFence)
	if err != nil {
		t.Fatal(err)
	}
	if on := heldOn(t, ctx, env, key); len(on) != 1 || on[0] != "a" {
		t.Fatalf("%s is held on %v, want the shard [a]", key, on)
	}
	_, err = s2.TryLock(ctx, key, noFence)
	wantReason(t, err, lockv1.ErrorReason_CONTENDED)
	queued := queuedOn(t, env)
	waited := make(chan error, 1)
	go func() {
		h2, err := s2.Lock(ctx, key, noFence)
		if err == nil {
			err = h2.Release(ctx)
		}
		waited <- err
	}()
	awaitQueued(t, ctx, queued, key)
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("the same identity's other client, queued: %v", err)
	}

	// As the service tells them apart: by the instance of each session.
	api := raw(devenvtest.Client(t, env, "demo"))
	open := func(instance string) int64 {
		t.Helper()
		r, err := api.OpenSession(ctx, &lockv1.OpenSessionRequest{Class: entity.Name, Instance: instance})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetSessionId()
	}
	try := func(session int64, instance string) error {
		_, err := api.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Class: entity.Name, SessionId: session, Instance: instance})
		return err
	}
	holder := open("p1")
	if err := try(holder, "p1"); err != nil {
		t.Fatal(err)
	}
	in, err := api.Inspect(ctx, &lockv1.InspectRequest{Key: key, Class: entity.Name})
	if err != nil || in.GetHolder().GetInstance() != "p1" || in.GetHolder().GetSessionId() != holder {
		t.Fatalf("inspect: holder %v, %v; want session %d of instance p1", in.GetHolder(), err, holder)
	}
	err = try(open("p1"), "p1")
	wantReason(t, err, lockv1.ErrorReason_LEAKED)
	if _, meta := reason.Info(err); meta["holder_session"] != fmt.Sprint(holder) {
		t.Fatalf("LEAKED names holder_session %q, want the holding session %d (not its shard lease): %v", meta["holder_session"], holder, err)
	}
	wantReason(t, try(open("p2"), "p2"), lockv1.ErrorReason_CONTENDED)

	if _, err := api.Release(ctx, &lockv1.ReleaseRequest{Key: key, Class: entity.Name, SessionId: holder, AnyToken: true}); err != nil {
		t.Fatal(err)
	}
}

// staticHomes homes namespaces to regions.
type staticHomes map[string]string

func (h staticHomes) RegionOf(ns string) string { return h[ns] }

func TestAKeyOfAnotherRegionIsRefusedWithThatRegion(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{Region: "eu-west", Homes: staticHomes{"team-b": "us-east"}})
	ctx := ctxT(t, time.Minute)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "other"), "")
	_, err := s.TryLock(ctx, "team-b/jobs/1", noFence)
	r, meta := reason.Info(err)
	if r != lockv1.ErrorReason_WRONG_REGION || meta["region"] != "us-east" {
		t.Fatalf("error = %v (reason %s, metadata %v), want WRONG_REGION naming us-east", err, r, meta)
	}
	if on := heldOn(t, ctx, env, "team-b/jobs/1"); len(on) != 0 {
		t.Fatalf("a refused key is held on %v: the request was served, not redirected", on)
	}
	// This region's namespaces are served.
	d := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "")
	if _, err := d.TryLock(ctx, "team-a/jobs/1", noFence); err != nil {
		t.Fatalf("a key of this region's namespace: %v", err)
	}
}

// movingKey is a key whose range moves to shard add when it joins m.
func movingKey(m shardmap.Map, add string) (moving, staying string) {
	next := shardmap.Map{Version: m.Version + 1, Shards: m.Shards, Adding: add}
	for i := 0; moving == "" || staying == ""; i++ {
		key := fmt.Sprintf("team-a/move-%d/1", i)
		if next.Moving(key) {
			moving = key
		} else {
			staying = key
		}
	}
	return moving, staying
}

func TestAddingAShardWaitsForHoldersAndTokensGrowAcrossTheMove(t *testing.T) {
	env := sharded(t, []string{"a", "b", "c"}, []string{"a", "b"})
	ctx := ctxT(t, 2*time.Minute)
	m, _, _, _ := shardmap.Load(ctx, env.Etcd)
	moving, staying := movingKey(m, "c")
	source := m.Home(moving)
	// The source runs ahead of the destination in revision: only the
	// destination's epoch advance keeps the moved key's tokens growing.
	for i := range 50 {
		if _, err := env.ShardEtcd[source].Put(ctx, fmt.Sprintf("/pad/%d", i), "x"); err != nil {
			t.Fatal(err)
		}
	}
	holder := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), entity.Name)
	before, err := holder.TryLock(ctx, moving, noFence)
	if err != nil {
		t.Fatal(err)
	}
	// Only operators change the map.
	denied, err := adminv1.NewAdminServiceClient(devenvtest.Client(t, env, "demo").Conn()).AddShard(ctx, &adminv1.AddShardRequest{Shard: "c"})
	if err == nil {
		_, err = denied.Recv()
	}
	wantReason(t, err, lockv1.ErrorReason_PERMISSION_DENIED)
	stream, err := adminv1.NewAdminServiceClient(devenvtest.Client(t, env, "alice").Conn()).AddShard(ctx, &adminv1.AddShardRequest{Shard: "c", Reason: "test: add c"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		step, err := stream.Recv()
		if err != nil {
			t.Fatalf("the add ended before waiting for the holder: %v", err)
		}
		t.Logf("add shard: %s: %s", step.GetPhase(), step.GetDetail())
		if step.GetPhase() == "waiting" {
			break
		}
	}
	added := make(chan error, 1)
	go func() {
		for {
			step, err := stream.Recv()
			if err != nil {
				if err == io.EOF {
					err = nil
				}
				added <- err
				return
			}
			t.Logf("add shard: %s: %s", step.GetPhase(), step.GetDetail())
		}
	}()
	// While the holder holds, the range takes no new grants; others do.
	other := devenvtest.Session(t, devenvtest.Client(t, env, "other"), entity.Name)
	_, err = raw(devenvtest.Client(t, env, "other")).Acquire(ctx, &lockv1.AcquireRequest{
		SessionId: other.ID(), Instance: other.Instance(), Key: moving, Class: entity.Name})
	wantReason(t, err, lockv1.ErrorReason_MOVING)
	if _, err := holder.TryLock(ctx, staying, noFence); err != nil {
		t.Fatalf("a key whose range is not moving: %v", err)
	}
	select {
	case err := <-added:
		t.Fatalf("the move completed while %s was held (err %v)", moving, err)
	default:
	}
	// A waiting Lock outlasts the move and is granted on the destination.
	type result struct {
		h   *lockclient.Hold
		err error
	}
	waited := make(chan result, 1)
	go func() {
		h, err := other.Lock(ctx, moving, noFence)
		waited <- result{h, err}
	}()
	if err := before.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-added; err != nil {
		t.Fatalf("add shard: %v", err)
	}
	w := <-waited
	if w.err != nil {
		t.Fatalf("a Lock waiting through the move: %v", w.err)
	}
	after := w.h
	if on := heldOn(t, ctx, env, moving); len(on) != 1 || on[0] != "c" {
		t.Fatalf("after the move %s is held on %v, want [c]", moving, on)
	}
	if after.Token() <= before.Token() {
		t.Fatalf("token went backwards across the move: %s on %s, then %s on c", before.Token(), source, after.Token())
	}
	st, err := adminv1.NewAdminServiceClient(devenvtest.Client(t, env, "demo").Conn()).ShardMap(ctx, &adminv1.ShardMapRequest{})
	if err != nil || st.GetVersion() != m.Version+2 || len(st.GetShards()) != 3 || st.GetAdding() != "" {
		t.Fatalf("shard map after the add: %v (err %v), want version %d over a, b, c", st, err, m.Version+2)
	}
	if v := gauge(t, env.Registry, "lockplane_shard_map_version"); v != float64(m.Version+2) {
		t.Fatalf("lockplane_shard_map_version = %v, want %d", v, m.Version+2)
	}
	src, _, _ := epoch.Read(ctx, env.ShardEtcd[source])
	dst, _, _ := epoch.Read(ctx, env.ShardEtcd["c"])
	if dst.Epoch <= src.Epoch || dst.MapVersion != src.MapVersion {
		t.Fatalf("after the move: source %s epoch %d map %d, destination epoch %d map %d", source, src.Epoch, src.MapVersion, dst.Epoch, dst.MapVersion)
	}
}

// A shard's epoch is reported and advanced by name. The advance goes above
// the highest epoch the coord cluster saw the shard reach, so a shard whose
// record came back older (a restore from an earlier snapshot) cannot
// repeat tokens it issued since.
func TestAShardsEpochAdvancesAboveTheHighestItReached(t *testing.T) {
	env := sharded(t, []string{"a", "b"}, nil)
	ctx := ctxT(t, time.Minute)
	admin := adminv1.NewAdminServiceClient(devenvtest.Client(t, env, "alice").Conn())
	st, err := admin.Status(ctx, &adminv1.StatusRequest{Cluster: "a"})
	if err != nil || st.GetCluster() != "a" || st.GetEpoch() == 0 || st.GetMapVersion() != 1 || !st.GetQuorum() || st.GetHighestAllocated() < st.GetEpoch() {
		t.Fatalf("status of shard a: %v (err %v)", st, err)
	}
	_, err = admin.Status(ctx, &adminv1.StatusRequest{Cluster: "z"})
	wantReason(t, err, lockv1.ErrorReason_INVALID_ARGUMENT)

	old, _, _ := epoch.Read(ctx, env.ShardEtcd["a"])
	b, _, _ := epoch.Read(ctx, env.ShardEtcd["b"])
	adv, err := admin.AdvanceEpoch(ctx, &adminv1.AdvanceEpochRequest{Cluster: "a", ExpectedEpoch: old.Epoch, Reason: "test"})
	if err != nil || adv.GetEpoch() <= st.GetHighestAllocated() || adv.GetPreviousEpoch() != old.Epoch {
		t.Fatalf("advance shard a: %v (err %v), want above every allocated epoch (%d)", adv, err, st.GetHighestAllocated())
	}
	if now, _, _ := epoch.Read(ctx, env.ShardEtcd["b"]); now.Epoch != b.Epoch {
		t.Fatalf("advancing shard a moved shard b from epoch %d to %d", b.Epoch, now.Epoch)
	}
	// The record comes back as it was, as from a snapshot.
	if _, err := env.ShardEtcd["a"].Put(ctx, lockkey.EpochKey, string(old.Raw)); err != nil {
		t.Fatal(err)
	}
	again, err := admin.AdvanceEpoch(ctx, &adminv1.AdvanceEpochRequest{Cluster: "a", ExpectedEpoch: old.Epoch, Reason: "restored"})
	if err != nil || again.GetEpoch() <= adv.GetEpoch() {
		t.Fatalf("advance of a record older than the shard's highest epoch: %v (err %v), want above %d", again, err, adv.GetEpoch())
	}
}
