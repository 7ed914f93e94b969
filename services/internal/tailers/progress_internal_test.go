package tailers

import (
	"context"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/internal/etcdembed"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The archive's progress moves only under the election: a deposed
// archiver's Done is refused and leaves the leader's day.
func TestTheArchiveProgressMovesOnlyUnderTheElection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cluster, err := etcdembed.Start(ctx, etcdembed.Config{Dir: t.TempDir(), Members: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	env := struct{ Etcd *clientv3.Client }{cli}
	if _, err := env.Etcd.Put(ctx, "/sys/audit/archive/leader/x", "me"); err != nil {
		t.Fatal(err)
	}
	get, err := env.Etcd.Get(ctx, "/sys/audit/archive/leader/x")
	if err != nil {
		t.Fatal(err)
	}
	rev := get.Kvs[0].CreateRevision
	leading := etcdProgress{etcd: env.Etcd, timeout: time.Second,
		leader: clientv3.Compare(clientv3.CreateRevision("/sys/audit/archive/leader/x"), "=", rev)}
	deposed := leading
	deposed.leader = clientv3.Compare(clientv3.CreateRevision("/sys/audit/archive/leader/x"), "=", rev+1)

	if _, ok, err := leading.Last(ctx); ok || err != nil {
		t.Fatalf("a fresh cluster's progress: ok %v, %v", ok, err)
	}
	d1 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	if err := leading.Done(ctx, d1); err != nil {
		t.Fatal(err)
	}
	if err := deposed.Done(ctx, d1.AddDate(0, 0, -5)); err == nil {
		t.Fatal("a deposed archiver moved the progress")
	}
	if got, ok, err := leading.Last(ctx); !ok || err != nil || !got.Equal(d1) {
		t.Fatalf("progress %v (ok %v, %v), want %v", got, ok, err, d1)
	}
}
