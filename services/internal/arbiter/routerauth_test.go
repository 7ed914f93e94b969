package arbiter_test

import (
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/etcdauth"
	"github.com/lockplane/lockplane/services/internal/arbiter"
	"github.com/lockplane/lockplane/services/internal/etcdembed"
	"github.com/lockplane/lockplane/services/shardmap"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A Router on a region with etcd authentication on and no shard map yet
// initialises the map itself, as the Admin API's user (the lock path's
// user may not write it), and is then ready: what a first start after
// `lockplane up` does.
func TestARouterInitialisesTheShardMapAsTheAdminUser(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	spec := etcdauth.Generated()
	start := func() *etcdembed.Cluster {
		c, err := etcdembed.Start(ctx, etcdembed.Config{Dir: t.TempDir(), Members: 1, Auth: &spec})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	coordC, shardC := start(), start()
	as := func(c *etcdembed.Cluster, user string) *clientv3.Client {
		cl, err := clientv3.New(c.ClientConfig(user))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	// The up step: epochs bootstrapped as root; the map is left to the arbiter.
	if _, err := epoch.BootstrapRegion(ctx, as(coordC, etcdauth.RootUser), "coord",
		map[string]clientv3.KV{"a": as(shardC, etcdauth.RootUser)}, 0); err != nil {
		t.Fatal(err)
	}
	ro, err := arbiter.NewRouter(arbiter.RouterConfig{
		Config: arbiter.Config{Etcd: as(coordC, etcdauth.Arbiter), AdminEtcd: as(coordC, etcdauth.Admin), Cluster: "coord", AllowAnyWorkload: true},
		Shards: map[string]arbiter.Etcd{"a": as(shardC, etcdauth.Arbiter)}, AdminShards: map[string]arbiter.Etcd{"a": as(shardC, etcdauth.Admin)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ro.Ready(ctx); err != nil {
		t.Fatalf("ready: %v", err)
	}
	m, _, found, err := shardmap.Load(ctx, as(coordC, etcdauth.RootUser))
	if err != nil || !found || len(m.Shards) != 1 || m.Shards[0] != "a" {
		t.Fatalf("shard map after Ready: %+v found %v err %v, want one shard a", m, found, err)
	}

	// The same with the admin writes sent as the lock path's user: etcd
	// refuses the map's put, so the check above can fail.
	coord2, shard2 := start(), start()
	coordC, shardC = coord2, shard2
	if _, err := epoch.BootstrapRegion(ctx, as(coordC, etcdauth.RootUser), "coord",
		map[string]clientv3.KV{"a": as(shardC, etcdauth.RootUser)}, 0); err != nil {
		t.Fatal(err)
	}
	lockOnly, err := arbiter.NewRouter(arbiter.RouterConfig{
		Config: arbiter.Config{Etcd: as(coordC, etcdauth.Arbiter), Cluster: "coord", AllowAnyWorkload: true},
		Shards: map[string]arbiter.Etcd{"a": as(shardC, etcdauth.Arbiter)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := lockOnly.Ready(ctx); err == nil {
		t.Fatal("a router writing the shard map as the lock path's user was ready: etcd did not refuse it")
	}
}
