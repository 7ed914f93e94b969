package arbiter

import (
	"context"
	"github.com/lockplane/lockplane/services/epoch"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/etcdembed"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// oneMember starts a one-member embedded etcd cluster for an internal test
// and returns a client of it; both end with the test.
func oneMember(t testing.TB, ctx context.Context) *clientv3.Client {
	t.Helper()
	cluster, err := etcdembed.Start(ctx, etcdembed.Config{Dir: t.TempDir(), Members: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	cli, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	// A new cluster: the bootstrap step lockplane up and dev take.
	if _, err := epoch.Anchor(ctx, cli, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := epoch.Bootstrap(ctx, cli, cli, "default", 0); err != nil {
		t.Fatal(err)
	}
	return cli
}
