// Package devenvtest starts embedded environments for tests: a real 3-member
// etcd cluster and a real arbiter over mTLS, torn down with the test.
package devenvtest

import (
	"context"
	"github.com/lockplane/lockplane/services/resourcetest"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Fast is the tests' lock class: the shortest TTL etcd's default election
// timeout allows with room to spare, so expiry tests run in seconds.
var Fast = class.Class{Name: "fast", TTL: 3 * time.Second, Tier: class.TierCoord}

// OpTimeout is the etcd budget of a test's arbiters unless the test sets
// its own. Generous: CI runs these beside the e2e and the gate on two
// cores, where etcd stalls of a second or more happen; tests of quorum
// loss set their own.
const OpTimeout = 5 * time.Second

// Start runs an environment with the default and Fast classes.
//
// Authorisation is open by default here, and only here: a test that gives
// no Authorizer gets AllowAnyWorkload set for it (the arbiter exports
// lockplane_authorization_open 1 and warns on Options.Logger), as nearly every test
// exercises locking, not policy; tests of authorisation give an
// Authorizer. devenv.Start itself requires the choice to be made
// (TestStartRefusesNeitherOrBothAuthorisations).
func Start(t testing.TB, opts devenv.Options) *devenv.Env {
	t.Helper()
	resourcetest.NotShort(t, "a 3-member etcd cluster and an arbiter")
	if opts.Authorizer == nil {
		opts.AllowAnyWorkload = true
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.Classes == nil {
		opts.Classes = class.NewStatic(Fast)
	}
	if opts.OpTimeout == 0 {
		opts.OpTimeout = OpTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	env, err := devenv.Start(ctx, opts)
	if err != nil {
		t.Fatalf("start embedded environment: %v", err)
	}
	t.Cleanup(env.Close)
	return env
}

// Client dials env as the named identity, closed with the test.
func Client(t testing.TB, env *devenv.Env, name string) *lockclient.Client {
	t.Helper()
	c, err := env.Client(name)
	if err != nil {
		t.Fatalf("dial as %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.Close(ctx)
	})
	return c
}

// Session opens a session of the class on c.
func Session(t testing.TB, c *lockclient.Client, cls string) *lockclient.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.Session(ctx, cls)
	if err != nil {
		t.Fatalf("open session (%s): %v", cls, err)
	}
	return s
}

// Released returns a channel that receives the time the hold of key is
// deleted at etcd (released, expired or revoked) after now. The key must be
// held when it is called.
func Released(t testing.TB, ctx context.Context, env *devenv.Env, key string) <-chan time.Time {
	t.Helper()
	get, err := env.Etcd.Get(ctx, lockkey.HoldKey(key))
	if err != nil || len(get.Kvs) != 1 {
		t.Fatalf("%s is not held (err %v)", key, err)
	}
	at := make(chan time.Time, 1)
	go func() {
		for wr := range env.Etcd.Watch(ctx, lockkey.HoldKey(key), clientv3.WithRev(get.Header.Revision+1)) {
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					at <- time.Now()
					return
				}
			}
		}
	}()
	return at
}
