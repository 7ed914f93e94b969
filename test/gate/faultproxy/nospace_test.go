package faultproxy_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/resourcetest"
	"github.com/lockplane/lockplane/test/gate/faultproxy"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// etcdMember starts a one-member embedded etcd and returns its client
// address (host:port).
func etcdMember(t *testing.T) string {
	ports, err := resourcetest.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	ec := embed.NewConfig()
	ec.Dir = t.TempDir()
	cu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])}
	pu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[1])}
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	ec.InitialCluster = ec.Name + "=" + pu.String()
	ec.EnableGRPCGateway = false
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(ec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("etcd not ready within 30s")
	}
	return cu.Host
}

// An armed proxy answers an applied put under its prefix with NOSPACE,
// as etcd's quota applier does, while the write is in etcd; everything
// else, watches and leases included, passes through.
func TestNoSpaceAnswersAnAppliedGrantWithNoSpace(t *testing.T) {
	target := etcdMember(t)
	p, err := faultproxy.NewNoSpace("127.0.0.1:0", target, "/l/")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + p.Addr()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	lease, err := cli.Grant(ctx, 10)
	if err != nil {
		t.Fatalf("a lease grant through the proxy: %v", err)
	}
	w := cli.Watch(clientv3.WithRequireLeader(ctx), "/l/", clientv3.WithPrefix())
	grant := func(key string) error {
		_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, "held", clientv3.WithLease(lease.ID))).Commit()
		return err
	}
	if err := grant("/l/a"); err != nil {
		t.Fatalf("unarmed: %v", err)
	}
	p.Arm(1)
	if err := grant("/l/b"); !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("armed: want etcd's NOSPACE, got %v", err)
	}
	if _, err := cli.Txn(ctx).Then(clientv3.OpPut("/other", "x")).Commit(); err != nil {
		t.Fatalf("a Txn outside the prefix is not touched: %v", err)
	}
	r, err := cli.Get(ctx, "/l/b")
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("the write answered NOSPACE must be in etcd: %v %v", r, err)
	}
	if p.Injected() != 1 {
		t.Fatalf("injected %d, want 1", p.Injected())
	}
	for _, want := range []string{"/l/a", "/l/b"} {
		select {
		case ev := <-w:
			if len(ev.Events) == 0 || string(ev.Events[0].Kv.Key) != want {
				t.Fatalf("watch: want %s, got %+v (%v)", want, ev.Events, ev.Err())
			}
		case <-ctx.Done():
			t.Fatal("the watch through the proxy saw nothing")
		}
	}
}
