package arbiter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// releaser ends the grant (key, session, token) however the variant under
// test does it.
type releaser func(ctx context.Context, key string, session int64, tok uint64) error

// staleReleaseViolation runs the scenario: A is granted and releases; B is
// granted; A's release is delivered again (a retry, or a late duplicate).
// It returns what went wrong, or "" if B's hold survived.
func staleReleaseViolation(t *testing.T, env *devenv.Env, key string, release releaser) string {
	ctx := ctxT(t, 30*time.Second)
	a := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "")
	b := devenvtest.Session(t, devenvtest.Client(t, env, "other"), "")
	ha, err := a.TryLock(ctx, key, noFence)
	if err != nil {
		t.Fatal(err)
	}
	if err := release(ctx, key, a.ID(), uint64(ha.Token())); err != nil {
		t.Fatal(err)
	}
	hb, err := b.TryLock(ctx, key, noFence)
	if err != nil {
		t.Fatal(err)
	}
	if err := release(ctx, key, a.ID(), uint64(ha.Token())); err != nil {
		t.Fatal(err)
	}
	resp, err := env.Etcd.Get(ctx, lockkey.HoldKey(key))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].ModRevision != hb.Token().Revision() {
		return fmt.Sprintf("the stale release deleted B's hold of %s", key)
	}
	return ""
}

func TestStaleReleaseNeverDeletesNewerHold(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	c := devenvtest.Client(t, env, "demo")
	var results []bool
	viaArbiter := func(ctx context.Context, key string, session int64, tok uint64) error {
		r, err := raw(c).Release(ctx, &lockv1.ReleaseRequest{Key: key, SessionId: session, Token: tok})
		results = append(results, r.GetReleased())
		return err
	}
	if v := staleReleaseViolation(t, env, "team-a/stale/1", viaArbiter); v != "" {
		t.Fatal(v)
	}
	if len(results) != 2 || !results[0] || results[1] {
		t.Fatalf("released = %v, want [true false]: the first release ends the grant, the stale one reports it deleted nothing", results)
	}
}

// The scenario must catch a release that deletes by key alone.
func TestStaleReleaseCheckCatchesUnconditionalDelete(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	unconditional := func(ctx context.Context, key string, _ int64, _ uint64) error {
		_, err := env.Etcd.Delete(ctx, lockkey.HoldKey(key))
		return err
	}
	if v := staleReleaseViolation(t, env, "team-a/stale/2", unconditional); v == "" {
		t.Fatal("an unconditional delete passed the stale release check")
	}
}

func TestReleaseOfAnEarlierEpochDeletesNothing(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 30*time.Second)
	c := devenvtest.Client(t, env, "demo")
	s := devenvtest.Session(t, c, "")
	h, err := s.TryLock(ctx, "team-a/epoch/1", noFence)
	if err != nil {
		t.Fatal(err)
	}
	// Same revision, previous epoch: must not match the hold.
	forged := uint64(h.Token()) - 1<<48
	if forged>>48 != 0 {
		r, err := raw(c).Release(ctx, &lockv1.ReleaseRequest{Key: "team-a/epoch/1", SessionId: s.ID(), Token: forged})
		if err != nil || r.GetReleased() {
			t.Fatalf("release with an earlier epoch's token: released=%v err=%v", r.GetReleased(), err)
		}
	}
	// A token of another revision does not match either.
	r, err := raw(c).Release(ctx, &lockv1.ReleaseRequest{Key: "team-a/epoch/1", SessionId: s.ID(), Token: uint64(h.Token()) + 1})
	if err != nil || r.GetReleased() {
		t.Fatalf("release with a wrong revision: released=%v err=%v", r.GetReleased(), err)
	}
	resp, _ := env.Etcd.Get(ctx, lockkey.HoldKey("team-a/epoch/1"), clientv3.WithCountOnly())
	if resp.Count != 1 {
		t.Fatal("hold was deleted by a release that did not name it")
	}
}
