package arbiter_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/internal/arbiter"
	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A session's lease on a shard is granted before its record is on the
// coord cluster, so a renewal can read the records in between and miss
// it; yet its holder counts a deadline from that renewal's send time. The
// lease a hold attaches to must outlive that deadline.
func TestAShardLeaseOutlivesTheDeadlineOfARenewalThatMissedIt(t *testing.T) {
	cls := class.Class{Name: "entity-8s", TTL: 8 * time.Second, Tier: class.TierEntity, Prefixes: []string{"team-a/slow-record/"}}
	env := devenvtest.Start(t, devenv.Options{Classes: class.NewStatic(devenvtest.Fast, cls), Shards: []string{"a"}})
	ctx := ctxT(t, time.Minute)
	// The raw API: no client renews the session behind the test's back.
	api := raw(devenvtest.Client(t, env, "demo"))
	s, err := api.OpenSession(ctx, &lockv1.OpenSessionRequest{Class: cls.Name})
	if err != nil {
		t.Fatal(err)
	}
	granted, record := make(chan struct{}), make(chan struct{})
	env.Router.SetTestHooks(&arbiter.TestHooks{ShardLeaseGranted: func(session int64, shard string) {
		if session == s.GetSessionId() {
			close(granted)
			<-record
		}
	}})
	acquired := make(chan error, 1)
	go func() {
		_, err := api.Acquire(ctx, &lockv1.AcquireRequest{Key: "team-a/slow-record/1", Class: cls.Name,
			SessionId: s.GetSessionId(), Instance: s.GetInstance()})
		acquired <- err
	}()
	<-granted
	// The record's write is slow (the fault): a renewal sent well after
	// the shard lease's grant reads the records before it lands.
	time.Sleep(3 * time.Second)
	ka, err := api.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ka.CloseSend()
	sent := time.Now()
	if err := ka.Send(&lockv1.KeepAliveRequest{SessionId: s.GetSessionId()}); err != nil {
		t.Fatal(err)
	}
	r, err := ka.Recv()
	if err != nil || r.GetTtl() == nil {
		t.Fatalf("renewal: %v, %v", r, err)
	}
	deadline := sent.Add(r.GetTtl().AsDuration())
	close(record)
	if err := <-acquired; err != nil {
		t.Fatal(err)
	}

	rec, err := env.Etcd.Get(ctx, lockkey.ShardLeaseKey(s.GetSessionId(), "a"))
	if err != nil || len(rec.Kvs) != 1 {
		t.Fatalf("the shard lease record: %v (%v)", rec, err)
	}
	lease, err := strconv.ParseInt(string(rec.Kvs[0].Value), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	ttl, err := env.ShardEtcd["a"].TimeToLive(ctx, clientv3.LeaseID(lease))
	if err != nil {
		t.Fatal(err)
	}
	expires := time.Now().Add(time.Duration(ttl.TTL) * time.Second)
	// etcd reports a lease's time left in whole seconds, truncated: a
	// second's slack, well inside the 3 s the slow record opens.
	if short := deadline.Sub(expires); short > time.Second {
		t.Fatalf("the hold's shard lease expires %v before the deadline the renewal sent after its grant gave the holder", short.Round(time.Millisecond))
	}
	t.Logf("shard lease expires %v after the renewal's deadline", -deadline.Sub(expires).Round(time.Millisecond))
}
