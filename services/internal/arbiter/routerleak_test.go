package arbiter_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// On the entity tier a hold is on the session's shard lease, which no
// client knows. A session that ended at the coord cluster while its shard
// lease still lives there (the lease outlives it until its TTL) must still
// be named as itself by LEAKED and Inspect, never as its shard lease; a
// hold that does not record its session (written before holds did, or
// unreadable) names none.
func TestARouterNeverNamesAShardLease(t *testing.T) {
	env := sharded(t, []string{"a"}, nil)
	ctx := ctxT(t, time.Minute)
	shard := env.ShardEtcd["a"]
	api := raw(devenvtest.Client(t, env, "demo"))
	open := func(instance string) int64 {
		t.Helper()
		r, err := api.OpenSession(ctx, &lockv1.OpenSessionRequest{Class: entity.Name, Instance: instance})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetSessionId()
	}
	try := func(key string, session int64, instance string) error {
		_, err := api.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Class: entity.Name, SessionId: session, Instance: instance})
		return err
	}
	inspect := func(key string) *lockv1.Holder {
		t.Helper()
		in, err := api.Inspect(ctx, &lockv1.InspectRequest{Key: key, Class: entity.Name})
		if err != nil || !in.GetHeld() {
			t.Fatalf("inspect %s: %v, %v; want it held", key, in, err)
		}
		return in.GetHolder()
	}
	// keep renews a shard lease directly: the test holds it past the
	// coord session, as a lease outlives its session until its TTL.
	keep := func(lease int64) {
		t.Helper()
		if _, err := shard.KeepAliveOnce(ctx, clientv3.LeaseID(lease)); err != nil {
			t.Fatal(err)
		}
	}

	const key = "team-a/coord-ended/1"
	s := open("p1")
	if err := try(key, s, "p1"); err != nil {
		t.Fatal(err)
	}
	rec, err := env.Etcd.Get(ctx, lockkey.ShardLeaseKey(s, "a"))
	if err != nil || len(rec.Kvs) != 1 {
		t.Fatalf("the session's shard lease record: %v, %v", rec, err)
	}
	lease, _ := strconv.ParseInt(string(rec.Kvs[0].Value), 10, 64)
	identity := inspect(key).GetIdentity()
	// The session ends at the coord cluster alone: its records there
	// (the shard lease's owner among them) go; the shard lease lives on.
	if _, err := env.Etcd.Revoke(ctx, clientv3.LeaseID(s)); err != nil {
		t.Fatal(err)
	}
	keep(lease)
	err = try(key, open("p1"), "p1")
	wantReason(t, err, lockv1.ErrorReason_LEAKED)
	if _, meta := reason.Info(err); meta["holder_session"] != fmt.Sprint(s) {
		t.Errorf("LEAKED after the coord session ended names holder_session %q, want the session %d (its shard lease is %d): %v", meta["holder_session"], s, lease, err)
	}
	keep(lease)
	if got := inspect(key).GetSessionId(); got != s {
		t.Errorf("inspect after the coord session ended: holder session %d, want %d (its shard lease is %d)", got, s, lease)
	}

	// Holds written on a shard lease with no coord session recorded: one
	// as holds were before they recorded it, one unreadable.
	forge := func(key, value string) int64 {
		t.Helper()
		g, err := shard.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := shard.Put(ctx, lockkey.HoldKey(key), value, clientv3.WithLease(g.ID)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			shard.Revoke(ctx, g.ID)
		})
		return int64(g.ID)
	}
	const old, unreadable = "team-a/old-hold/1", "team-a/unreadable-hold/1"
	oldLease := forge(old, fmt.Sprintf(`{"identity":%q,"instance":"p3","session":0,"class":%q,"since":"2020-01-01T00:00:00Z"}`, identity, entity.Name))
	err = try(old, open("p3"), "p3")
	wantReason(t, err, lockv1.ErrorReason_LEAKED)
	if _, meta := reason.Info(err); meta["holder_session"] != "" {
		t.Errorf("LEAKED by a hold that records no coord session names holder_session %q (its shard lease is %d), want none: %v", meta["holder_session"], oldLease, err)
	}
	if got := inspect(old).GetSessionId(); got != 0 {
		t.Errorf("inspect of a hold that records no coord session: holder session %d (its shard lease is %d), want 0", got, oldLease)
	}
	badLease := forge(unreadable, "not a hold record")
	if got := inspect(unreadable).GetSessionId(); got != 0 {
		t.Errorf("inspect of an unreadable hold: holder session %d (its shard lease is %d), want 0", got, badLease)
	}
}
