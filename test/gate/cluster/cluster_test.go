package cluster_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/lockplane/lockplane/test/gate/cluster"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

var etcdBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gate-etcd-")
	if err != nil {
		panic(err)
	}
	if etcdBin, err = cluster.BuildEtcd(dir); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func start(t *testing.T) (*cluster.Cluster, context.Context) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	c, err := cluster.Start(ctx, cluster.Config{Bin: etcdBin, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, ctx
}

// until polls cond (cluster state has no event to wait on) for at most d.
func until(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("not within %s: %s", d, what)
}

func put(ctx context.Context, eps []string, k string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	pctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), 5*time.Second)
	defer cancel()
	_, err = cli.Put(pctx, k, "v")
	return err
}

func TestIsolatedLeaderIsReplacedAndRejoins(t *testing.T) {
	c, ctx := start(t)
	old, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Isolate(old)
	var rest []string
	var restIdx []int
	for i, m := range c.Members {
		if i != old {
			rest, restIdx = append(rest, m.Client), append(restIdx, i)
		}
	}
	until(t, 20*time.Second, "the majority elects a new leader", func() bool {
		l, err := c.StatusOf(ctx, restIdx[0])
		return err == nil && l != "" && l != c.Members[old].ID
	})
	if err := put(ctx, rest, "/after-isolation"); err != nil {
		t.Fatalf("write through the majority: %v", err)
	}
	// The isolated member has no leader (check-quorum stepped it down), so
	// it refuses rather than serve.
	until(t, 20*time.Second, "the isolated member steps down", func() bool {
		l, err := c.StatusOf(ctx, old)
		return err == nil && (l == "" || l != c.Members[old].ID)
	})
	if err := put(ctx, []string{c.Members[old].Client}, "/via-isolated"); err == nil {
		t.Fatal("a write through the isolated member succeeded")
	}
	c.Heal()
	if err := c.WaitHealthy(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestKilledMemberRestartsAndMinorityPartitionCannotWrite(t *testing.T) {
	c, ctx := start(t)
	c.Kill(2) // perhaps the leader: the others elect one first
	if err := c.WaitHealthy(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := put(ctx, c.Endpoints()[:2], "/with-one-down"); err != nil {
		t.Fatalf("write with one member killed: %v", err)
	}
	if err := c.Restart(2); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	// {0} | {1, 2}: the minority side cannot commit.
	c.Partition([]int{0}, []int{1, 2})
	until(t, 20*time.Second, "member 0 loses its leader", func() bool {
		l, err := c.StatusOf(ctx, 0)
		return err == nil && (l == "" || l == c.Members[0].ID) && put(ctx, c.Endpoints()[:1], "/minority") != nil
	})
	if err := put(ctx, c.Endpoints()[1:], "/majority"); err != nil {
		t.Fatalf("write on the majority side: %v", err)
	}
	c.Heal()
	if err := c.WaitHealthy(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}
