package arbiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestNoQuorumFailsClosed(t *testing.T) {
	opTimeout := time.Second
	env := devenvtest.Start(t, devenv.Options{OpTimeout: opTimeout})
	ctx := ctxT(t, 2*time.Minute)
	c := devenvtest.Client(t, env, "demo")
	s := devenvtest.Session(t, c, devenvtest.Fast.Name)
	if _, err := s.TryLock(ctx, "team-a/q/held", noFence); err != nil {
		t.Fatal(err)
	}
	env.Cluster.StopMember(0)
	env.Cluster.StopMember(1)

	// "Promptly": within the arbiter's bound on one etcd call plus the
	// gRPC round trip, not after the caller's own 30 s deadline.
	bound := 3 * opTimeout
	for _, key := range []string{"team-a/q/free", "team-a/q/held"} {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		start := time.Now()
		_, err := raw(c).Acquire(cctx, &lockv1.AcquireRequest{Key: key, SessionId: s.ID(), Instance: s.Instance(), Class: devenvtest.Fast.Name})
		cancel()
		took := time.Since(start)
		wantReason(t, err, lockv1.ErrorReason_NO_QUORUM)
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("code %s, want UNAVAILABLE", status.Code(err))
		}
		if took > bound {
			t.Fatalf("acquire took %s to fail; want under %s", took, bound)
		}
		t.Logf("acquire %s without quorum: NO_QUORUM after %s", key, took.Round(time.Millisecond))
	}

	// No renewal succeeds: every keepalive on a raw stream is refused.
	ka, err := raw(c).KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := ka.Send(&lockv1.KeepAliveRequest{SessionId: s.ID()}); err != nil {
			t.Fatal(err)
		}
		r, err := ka.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r.GetError() != lockv1.ErrorReason_NO_QUORUM || r.GetTtl() != nil {
			t.Fatalf("keepalive without quorum: %v, want NO_QUORUM and no TTL", r)
		}
	}
	ka.CloseSend()
	// The library has stopped granting permission to start work.
	if s.CanStart() {
		t.Fatal("CanStart is still true after keepalives failed")
	}

	// Quorum back: the service recovers without a restart.
	if err := env.Cluster.StartMember(ctx, 0, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	s2 := devenvtest.Session(t, devenvtest.Client(t, env, "other"), "")
	// (A fresh key: the grant attempted during the outage had an unknown
	// outcome and may have committed once the quorum came back.)
	if _, err := s2.TryLock(ctx, "team-a/q/after", noFence); err != nil {
		t.Fatalf("acquire after quorum returned: %v", err)
	}
}

// A shard without quorum refuses an entity-tier Acquire that needs a
// lease there, and the refusal is counted against the shard: the
// NO_QUORUM alert is by cluster.
func TestAShardWithoutQuorumCountsItsRefusals(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{OpTimeout: time.Second, Shards: []string{"a"}, Classes: class.NewStatic(devenvtest.Fast, entity)})
	ctx := ctxT(t, time.Minute)
	c := devenvtest.Client(t, env, "demo")
	s := devenvtest.Session(t, c, entity.Name)
	shard := env.ShardClusters["a"]
	for i := range shard.Size()/2 + 1 {
		shard.StopMember(i)
	}
	_, err := raw(c).Acquire(ctx, &lockv1.AcquireRequest{Key: "team-a/q/shard", SessionId: s.ID(), Instance: s.Instance(), Class: entity.Name})
	wantReason(t, err, lockv1.ErrorReason_NO_QUORUM)
	fams, err := env.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got float64
	for _, f := range fams {
		if f.GetName() != "lockplane_refusals_no_quorum_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cluster" && l.GetValue() == "a" {
					got += m.GetCounter().GetValue()
				}
			}
		}
	}
	if got < 1 {
		t.Fatalf("NO_QUORUM refusals counted against shard a: %v, want at least 1", got)
	}
}
