package arbiter_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/internal/arbiter"
	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// holdLease is the lease of key's hold on cl, 0 when the key is free.
func holdLease(t *testing.T, cl *clientv3.Client, key string) int64 {
	t.Helper()
	resp, err := cl.Get(ctxT(t, 10*time.Second), lockkey.HoldKey(key))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0
	}
	return resp.Kvs[0].Lease
}

// Release with any_token ends the caller's session's hold on the key,
// whatever its token, and nobody else's.
func TestReleaseByAnyTokenEndsOnlyTheCallersSessionsHold(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 30*time.Second)
	demo, other := raw(devenvtest.Client(t, env, "demo")), raw(devenvtest.Client(t, env, "other"))
	open := func(c lockv1.LockServiceClient) int64 {
		s, err := c.OpenSession(ctx, &lockv1.OpenSessionRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return s.SessionId
	}
	mine, theirs := open(demo), open(other)
	const key = "team-a/anytoken/1"
	if _, err := demo.Acquire(ctx, &lockv1.AcquireRequest{Key: key, SessionId: mine}); err != nil {
		t.Fatal(err)
	}

	_, err := demo.Release(ctx, &lockv1.ReleaseRequest{Key: key, SessionId: mine, Token: 1 << 48, AnyToken: true})
	if r, meta := reason.Info(err); r != lockv1.ErrorReason_INVALID_ARGUMENT || meta["field"] != "token" {
		t.Fatalf("any_token with a token: %v (reason %s, field %q), want INVALID_ARGUMENT naming token", err, r, meta["field"])
	}
	// Another session's any_token release ends nothing of this one.
	if r, err := other.Release(ctx, &lockv1.ReleaseRequest{Key: key, SessionId: theirs, AnyToken: true}); err != nil || r.Released {
		t.Fatalf("another session's any_token release: released %v, err %v", r.GetReleased(), err)
	}
	// A session ID is no secret (Inspect reports it): another identity
	// naming it is refused.
	_, err = other.Release(ctx, &lockv1.ReleaseRequest{Key: key, SessionId: mine, AnyToken: true})
	wantReason(t, err, lockv1.ErrorReason_SESSION_NOT_OWNED)
	if holdLease(t, env.Etcd, key) != mine {
		t.Fatal("the hold was ended by a release of another session or identity")
	}
	r, err := demo.Release(ctx, &lockv1.ReleaseRequest{Key: key, SessionId: mine, AnyToken: true})
	if err != nil || !r.Released {
		t.Fatalf("any_token release of the session's own hold: released %v, err %v", r.GetReleased(), err)
	}
	if holdLease(t, env.Etcd, key) != 0 {
		t.Fatal("the hold is still there")
	}
	// Nothing held: nothing released, no error.
	if r, err := demo.Release(ctx, &lockv1.ReleaseRequest{Key: key, SessionId: mine, AnyToken: true}); err != nil || r.Released {
		t.Fatalf("any_token release of a free key: released %v, err %v", r.GetReleased(), err)
	}
}

// A cleanup that lands late (its answer lost, the client retried and was
// granted the key again) must not end the newer grant: the hook holds the
// release between its read of the session and its Txn while the session
// is granted the key.
func TestALateReleaseByAnyTokenNeverEndsALaterGrant(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 30*time.Second)
	c := raw(devenvtest.Client(t, env, "demo"))
	s, err := c.OpenSession(ctx, &lockv1.OpenSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	const key = "team-a/anytoken/late"
	read, goOn := make(chan struct{}), make(chan struct{})
	env.Arbiter.SetTestHooks(&arbiter.TestHooks{AnyTokenRead: func(k string, _ int64) {
		if k == key {
			close(read)
			<-goOn
		}
	}})
	t.Cleanup(func() { env.Arbiter.SetTestHooks(nil) })
	late := make(chan *lockv1.ReleaseResponse, 1)
	go func() {
		r, err := c.Release(ctx, &lockv1.ReleaseRequest{Key: key, SessionId: s.SessionId, AnyToken: true})
		if err != nil {
			t.Error(err)
		}
		late <- r
	}()
	select {
	case <-read:
	case r := <-late:
		t.Fatalf("the release answered (released %v) without the hook between its read and its Txn", r.GetReleased())
	}
	g, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: key, SessionId: s.SessionId})
	if err != nil {
		t.Fatal(err)
	}
	close(goOn)
	if r := <-late; r.GetReleased() {
		t.Fatal("the late any_token release reports it ended a hold")
	}
	resp, err := env.Etcd.Get(ctx, lockkey.HoldKey(key))
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].ModRevision != g.Token.Revision {
		t.Fatalf("the grant made after the release read the session is gone: %v %v", resp.Kvs, err)
	}
}

// A durable class's queue key of the session for the key goes with it.
func TestReleaseByAnyTokenRemovesTheSessionsDurableQueueKey(t *testing.T) {
	cls := class.Class{Name: "ordered", TTL: time.Minute, Tier: class.TierCoord, Fairness: class.FairnessDurable}
	env := devenvtest.Start(t, devenv.Options{Classes: class.NewStatic(cls)})
	ctx := ctxT(t, 30*time.Second)
	c := raw(devenvtest.Client(t, env, "other"))
	s, err := c.OpenSession(ctx, &lockv1.OpenSessionRequest{Class: cls.Name})
	if err != nil {
		t.Fatal(err)
	}
	const key = "team-a/anytoken/durable"
	// Its queue key, as a waiter whose answer was lost leaves it.
	if _, err := env.Etcd.Put(ctx, lockkey.WaitKey(key, s.SessionId), fmt.Sprintf(`{"identity":"x","until":%q}`,
		time.Now().Add(time.Minute).UTC().Format(time.RFC3339Nano)), clientv3.WithLease(clientv3.LeaseID(s.SessionId))); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Release(ctx, &lockv1.ReleaseRequest{Key: key, SessionId: s.SessionId, Class: cls.Name, AnyToken: true}); err != nil {
		t.Fatal(err)
	}
	left, err := env.Etcd.Get(ctx, lockkey.WaitersOf(key), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || left.Count != 0 {
		t.Fatalf("%d queue keys left after the any_token release (err %v)", left.Count, err)
	}
}

// Through the Router, an entity key's hold is ended on its shard, with the
// session's lease there.
func TestReleaseByAnyTokenOnAnEntityShard(t *testing.T) {
	env := sharded(t, []string{"a", "b"}, nil)
	ctx := ctxT(t, time.Minute)
	demo, other := raw(devenvtest.Client(t, env, "demo")), raw(devenvtest.Client(t, env, "other"))
	s, err := demo.OpenSession(ctx, &lockv1.OpenSessionRequest{Class: entity.Name})
	if err != nil {
		t.Fatal(err)
	}
	const key = "team-a/anytoken/entity"
	if _, err := demo.Acquire(ctx, &lockv1.AcquireRequest{Key: key, SessionId: s.SessionId, Class: entity.Name}); err != nil {
		t.Fatal(err)
	}
	_, err = other.Release(ctx, &lockv1.ReleaseRequest{Key: key, SessionId: s.SessionId, Class: entity.Name, AnyToken: true})
	wantReason(t, err, lockv1.ErrorReason_SESSION_NOT_OWNED)
	_, err = demo.Release(ctx, &lockv1.ReleaseRequest{Key: key, SessionId: s.SessionId, Class: entity.Name, Token: 7, AnyToken: true})
	wantReason(t, err, lockv1.ErrorReason_INVALID_ARGUMENT)
	if on := heldOn(t, ctx, env, key); len(on) != 1 {
		t.Fatalf("held on %v before the release", on)
	}
	r, err := demo.Release(ctx, &lockv1.ReleaseRequest{Key: key, SessionId: s.SessionId, Class: entity.Name, AnyToken: true})
	if err != nil || !r.Released {
		t.Fatalf("any_token release on a shard: released %v, err %v", r.GetReleased(), err)
	}
	if on := heldOn(t, ctx, env, key); len(on) != 0 {
		t.Fatalf("still held on %v", on)
	}
}
