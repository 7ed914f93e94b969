package arbiter

import (
	"context"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/internal/etcdembed"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// oneMember starts a one-member embedded etcd cluster for an internal test
// and returns a client of it; both end with the test.
func oneMember(t testing.TB, ctx context.Context) *clientv3.Client {
	_, cli := startOne(t, ctx, etcdembed.Config{})
	return cli
}

// startOne starts a one-member cluster shaped by cfg, bootstrapped as a new
// region's (the step lockplane up and dev take), and a client of it.
func startOne(t testing.TB, ctx context.Context, cfg etcdembed.Config) (*etcdembed.Cluster, *clientv3.Client) {
	t.Helper()
	cfg.Dir, cfg.Members = t.TempDir(), 1
	cluster, err := etcdembed.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	cli, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	if _, err := epoch.Anchor(ctx, cli, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := epoch.Bootstrap(ctx, cli, cli, "default", 0); err != nil {
		t.Fatal(err)
	}
	return cluster, cli
}

// readyArbiter is an Arbiter of cli, its epoch loaded but not Run: no watch
// refreshes its cache, so tests can hold it stale.
func readyArbiter(t testing.TB, ctx context.Context, cli *clientv3.Client) *Arbiter {
	t.Helper()
	a, err := New(Config{Etcd: cli, AllowAnyWorkload: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	return a
}
