package arbiter_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/identity"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/internal/arbiter"
	"github.com/lockplane/lockplane/services/shardmap"
	"google.golang.org/grpc"
)

// secondRouter serves another Router over env's coord cluster and only the
// named shards, as an arbiter does while a new --shard list rolls out; it
// returns a client of it as the named identity.
func secondRouter(t *testing.T, env *devenv.Env, shards []string, as string) *lockclient.Client {
	t.Helper()
	addr := serveRouter(t, env, func(cfg *arbiter.RouterConfig) {
		cfg.Classes = class.NewStatic(devenvtest.Fast, entity)
		cfg.Shards = map[string]arbiter.Etcd{}
		for _, s := range shards {
			cfg.Shards[s] = env.ShardEtcd[s]
		}
	})
	return dialAs(t, env, addr, as)
}

// serveRouter serves another Router over env's clusters, as the arbiter
// identity, configured as with says after the defaults; it returns its
// address once the Router is ready.
func serveRouter(t *testing.T, env *devenv.Env, with func(*arbiter.RouterConfig)) string {
	t.Helper()
	src, err := env.Profile.Source("arbiter")
	if err != nil {
		t.Fatal(err)
	}
	self, _ := identity.ID(src)
	cfg := arbiter.RouterConfig{Config: arbiter.Config{Etcd: env.Etcd, Cluster: "coord", Self: self,
		OpTimeout: devenvtest.OpTimeout, AllowAnyWorkload: true}, Shards: map[string]arbiter.Etcd{}}
	for name, cl := range env.ShardEtcd {
		cfg.Shards[name] = cl
	}
	with(&cfg)
	ro, err := arbiter.NewRouter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go ro.Run(ctx)
	if err := ro.Ready(ctxT(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	creds, err := identity.ServerCredentials(src)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(creds), grpc.ChainUnaryInterceptor(ro.UnaryInterceptor()), grpc.ChainStreamInterceptor(ro.StreamInterceptor()))
	ro.Register(srv)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// keyOn is a key the map homes to shard.
func keyOn(t *testing.T, env *devenv.Env, shard string) string {
	t.Helper()
	m, _, _, err := shardmap.Load(ctxT(t, 10*time.Second), env.Etcd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if key := fmt.Sprintf("team-a/rollout-%d/1", i); m.Home(key) == shard {
			return key
		}
	}
}

// While arbiters roll out a new --shard list, one without shard b must not
// tell a holder on b that its session was renewed: it cannot renew the
// lease on b, which would expire under a holder that believes it holds.
func TestARenewalThroughAnArbiterWithoutTheShardFails(t *testing.T) {
	env := sharded(t, []string{"a", "b"}, nil)
	ctx := ctxT(t, time.Minute)
	lacking := secondRouter(t, env, []string{"a"}, "demo")
	full := devenvtest.Client(t, env, "demo")
	// The session renews through the arbiter that lacks b; its hold on b
	// was granted through one that has it.
	s := devenvtest.Session(t, lacking, entity.Name)
	key := keyOn(t, env, "b")
	if _, err := raw(full).Acquire(ctx, &lockv1.AcquireRequest{Key: key, SessionId: s.ID(), Instance: s.Instance(), Class: entity.Name}); err != nil {
		t.Fatal(err)
	}
	ka, err := raw(lacking).KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ka.Send(&lockv1.KeepAliveRequest{SessionId: s.ID()}); err != nil {
		t.Fatal(err)
	}
	r, err := ka.Recv()
	if err != nil {
		t.Fatal(err)
	}
	ka.CloseSend()
	if r.GetError() != lockv1.ErrorReason_SHARD_UNKNOWN || r.GetTtl() != nil {
		t.Fatalf("a renewal through an arbiter without shard b: error %s (%s), ttl %v; want SHARD_UNKNOWN and no TTL", r.GetError(), r.GetErrorMessage(), r.GetTtl())
	}
	t.Logf("renewal through the arbiter without b: %s: %s", r.GetError(), r.GetErrorMessage())

	// The client library stops work at that answer, before its deadline.
	// CanStart has no event; sample it, within two keepalive intervals.
	for start := time.Now(); s.CanStart(); time.Sleep(5 * time.Millisecond) {
		if time.Since(start) > 2*s.TTL()/3 {
			t.Fatal("CanStart still true two keepalive intervals after SHARD_UNKNOWN renewals began")
		}
	}
	if left := s.RemainingTTL(); left <= 0 {
		t.Fatal("CanStart turned false only at the deadline, not at the failed keepalive")
	} else {
		t.Logf("CanStart false with %s left before the deadline", left.Round(time.Millisecond))
	}

	// Closing through that arbiter cannot revoke the lease on b: it must
	// say so rather than report the holds released.
	_, err = raw(lacking).CloseSession(ctx, &lockv1.CloseSessionRequest{SessionId: s.ID()})
	if on := heldOn(t, ctx, env, key); err == nil && len(on) > 0 {
		t.Fatalf("CloseSession through an arbiter without b answered OK while %s is still held on %v", key, on)
	}
	wantReason(t, err, lockv1.ErrorReason_SHARD_UNKNOWN)
	// One that has every shard closes it.
	if _, err := raw(full).CloseSession(ctx, &lockv1.CloseSessionRequest{SessionId: s.ID()}); err != nil {
		t.Fatal(err)
	}
	if on := heldOn(t, ctx, env, key); len(on) != 0 {
		t.Fatalf("after CloseSession %s is still held on %v", key, on)
	}
}
