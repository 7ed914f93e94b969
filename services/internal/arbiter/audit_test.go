package arbiter_test

import (
	"context"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/audit/audittest"
	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/epoch"
	clientv3 "go.etcd.io/etcd/client/v3"
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
	time.Sleep(heldFor) // a held on for a known time: a timer by nature
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
	// The handoff's waiter waited at least while a held on after it
	// queued; the grants of free keys did not.
	if handed.WaitedMs < heldFor.Milliseconds() {
		t.Errorf("handoff %+v: want the wait its hold record carries, at least %s", handed, heldFor)
	}
	for _, key := range []string{"team-a/audit/released", "team-a/audit/handed", "team-a/audit/expired"} {
		if g := audittest.Of(evs, key)[0]; g.WaitedMs != 0 {
			t.Errorf("grant %+v of a free key: want no wait", g)
		}
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

// An epoch advance through the Admin API with a hold open, and a shard
// added through it (the map written on coord, the shards stamped and the
// new one advanced), are told apart by the real tailers of each cluster:
// the hold ends as an epoch advance, beside the advance's own event, and
// every map write and stamp is a shard move, never an advance.
func TestTheLogTellsEpochAdvancesAndShardMoves(t *testing.T) {
	env := sharded(t, []string{"a", "b"}, []string{"a"})
	ctx := ctxT(t, 90*time.Second)
	store := audittest.New()
	tctx, stop := context.WithCancel(ctx)
	var tailing sync.WaitGroup
	for name, cl := range map[string]*clientv3.Client{"coord": env.Etcd, "a": env.ShardEtcd["a"], "b": env.ShardEtcd["b"]} {
		tailing.Add(1)
		go func() {
			defer tailing.Done()
			audit.Run(tctx, audit.Config{Cluster: name, Etcd: cl, Coord: env.Etcd, Store: store, Name: "t-" + name})
		}()
	}
	t.Cleanup(func() { stop(); tailing.Wait() })
	admin := adminv1.NewAdminServiceClient(devenvtest.Client(t, env, "alice").Conn())

	// A coord-tier hold open across an advance of the coord cluster (a key
	// outside the entity class's team-a/).
	const key = "team-b/audit/advanced"
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), devenvtest.Fast.Name)
	if _, err := s.TryLock(ctx, key, noFence); err != nil {
		t.Fatal(err)
	}
	st, err := admin.Status(ctx, &adminv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	adv, err := admin.AdvanceEpoch(ctx, &adminv1.AdvanceEpochRequest{ExpectedEpoch: st.GetEpoch(), Reason: "test: audit"})
	if err != nil || adv.GetDeletedHolds() != 1 {
		t.Fatalf("advance: %v (err %v), want the one hold deleted", adv, err)
	}
	// Shard b joins the map: map versions 2 (adding) and 3 on coord.
	before, _, _ := epoch.Read(ctx, env.ShardEtcd["a"])
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
	after, _, _ := epoch.Read(ctx, env.ShardEtcd["a"])
	if after.Epoch != before.Epoch || after.MapVersion != 3 {
		t.Fatalf("shard a went from %+v to %+v: want the same epoch stamped with map version 3", before, after)
	}

	// The last revisions of each cluster as the tailers read them.
	cluster := func(evs []audit.Event, name string) []audit.Event {
		var out []audit.Event
		for _, e := range evs {
			if e.Cluster == name && e.Key == "" && (e.Kind == audit.EpochAdvance || e.Kind == audit.ShardMove) {
				out = append(out, e)
			}
		}
		return out
	}
	stampedV3 := func(evs []audit.Event) bool {
		for _, e := range cluster(evs, "a") {
			if rec, err := epoch.Decode([]byte(e.Detail), 0); err == nil && rec.MapVersion == 3 {
				return true
			}
		}
		return false
	}
	// Until coord's tailer has read the map's version 3 too: the three
	// tailers run apart, and coord's bootstrap wrote an advance and a map
	// of its own, so a count of its events is met before then.
	last := func(evs []audit.Event, name string, n int) []audit.Kind {
		c := cluster(evs, name)
		return audittest.Kinds(c[max(0, len(c)-n):])
	}
	err = store.Await(ctx, func(evs []audit.Event) bool {
		return len(audittest.Of(evs, key)) == 2 && len(cluster(evs, "b")) >= 2 && stampedV3(evs) &&
			slices.Equal(last(evs, "coord", 3), []audit.Kind{audit.EpochAdvance, audit.ShardMove, audit.ShardMove})
	})
	evs := store.Events()
	if err != nil {
		for _, name := range []string{"coord", "a", "b"} {
			t.Logf("%s: %v", name, audittest.Kinds(cluster(evs, name)))
		}
		t.Fatalf("key %s: %v; want the tailers to have read the advance and the add", key, audittest.Kinds(audittest.Of(evs, key)))
	}
	held := audittest.Of(evs, key)
	if got := audittest.Kinds(held); !slices.Equal(got, []audit.Kind{audit.Grant, audit.EpochAdvance}) {
		t.Fatalf("%s: %v, want a grant ended by the epoch advance", key, got)
	}
	var advanced *audit.Event
	for _, e := range cluster(evs, "coord") {
		if e.Revision == held[1].Revision {
			advanced = &e
		}
	}
	if advanced == nil || advanced.Kind != audit.EpochAdvance || advanced.Epoch != adv.GetEpoch() || held[1].Session != s.ID() {
		t.Fatalf("the hold's end %+v: want at the revision of the coord's own epoch advance to %d (%+v), naming the session",
			held[1], adv.GetEpoch(), advanced)
	}
	// The advance ended the holder's session too: that end is the
	// advance's own event (above), none of the session's own.
	for _, e := range evs {
		if e.Key == "" && e.Session == s.ID() && e.Kind != audit.SessionOpen {
			t.Fatalf("the session's end %+v: want it told only by the advance at revision %d", e, held[1].Revision)
		}
	}
	// coord: the advance, then the two map writes (adding b, then with b).
	coord := cluster(evs, "coord")
	if got := audittest.Kinds(coord[len(coord)-3:]); !slices.Equal(got, []audit.Kind{audit.EpochAdvance, audit.ShardMove, audit.ShardMove}) {
		t.Errorf("coord: %v, want the advance then two shard moves", audittest.Kinds(coord))
	}
	// a: stamped with versions 2 and 3, its epoch kept: moves, not advances.
	a := cluster(evs, "a")
	if got := audittest.Kinds(a[len(a)-2:]); !slices.Equal(got, []audit.Kind{audit.ShardMove, audit.ShardMove}) {
		t.Errorf("shard a: %v, want its last two writes (the stamps) shard moves", audittest.Kinds(a))
	}
	for _, e := range a[len(a)-2:] {
		if e.Epoch != before.Epoch {
			t.Errorf("shard a's stamp %+v: want its epoch %d", e, before.Epoch)
		}
	}
	// b: advanced above every source to receive ranges, then stamped.
	b := cluster(evs, "b")
	if got := audittest.Kinds(b[len(b)-2:]); !slices.Equal(got, []audit.Kind{audit.EpochAdvance, audit.ShardMove}) {
		t.Errorf("shard b: %v, want an advance then a shard move last", audittest.Kinds(b))
	}
}
