package arbiter_test

import (
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
)

// records is an entity class that owns the keys under team-a/records/.
var records = class.Class{Name: "records", TTL: 3 * time.Second, Tier: class.TierEntity, Prefixes: []string{"team-a/records/"}}

// A key lives on one cluster, decided by the classes, never by the
// request: a second client naming a coord class for a key the entity
// class owns is refused WRONG_CLASS, naming the key's class, and the key
// stays held once, on its shard. Before, the coord cluster granted it too:
// two holders with incomparable tokens.
func TestAKeyIsGrantedThroughItsOwnClassOnly(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{Classes: class.NewStatic(devenvtest.Fast, records), Shards: []string{"a"}})
	ctx := ctxT(t, time.Minute)
	const key = "team-a/records/1"
	holder := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), records.Name)
	if _, err := holder.TryLock(ctx, key, noFence); err != nil {
		t.Fatal(err)
	}
	api := raw(devenvtest.Client(t, env, "other"))
	for _, named := range []string{devenvtest.Fast.Name, class.DefaultName} {
		s, err := api.OpenSession(ctx, &lockv1.OpenSessionRequest{Class: named})
		if err != nil {
			t.Fatal(err)
		}
		_, err = api.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Class: named, SessionId: s.GetSessionId()})
		wantReason(t, err, lockv1.ErrorReason_WRONG_CLASS)
		if _, meta := reason.Info(err); meta["class"] != records.Name {
			t.Fatalf("class %s: WRONG_CLASS names class %q, want %q: %v", named, meta["class"], records.Name, err)
		}
		// Nothing was left behind: no hold, no queue entry.
		if on := heldOn(t, ctx, env, key); len(on) != 1 || on[0] == "coord" {
			t.Fatalf("class %s: %s is held on %v, want its shard only", named, key, on)
		}
	}
	// A request naming no class gets the key's class: contention, not a
	// second grant.
	s, err := api.OpenSession(ctx, &lockv1.OpenSessionRequest{Class: records.Name})
	if err != nil {
		t.Fatal(err)
	}
	_, err = api.Acquire(ctx, &lockv1.AcquireRequest{Key: key, SessionId: s.GetSessionId()})
	wantReason(t, err, lockv1.ErrorReason_CONTENDED)
	// And the owning class serves only its own keys.
	_, err = api.Acquire(ctx, &lockv1.AcquireRequest{Key: "team-a/other/1", Class: records.Name, SessionId: s.GetSessionId()})
	wantReason(t, err, lockv1.ErrorReason_WRONG_CLASS)
}
