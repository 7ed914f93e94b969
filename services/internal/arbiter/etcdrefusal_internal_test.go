package arbiter

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/internal/etcdembed"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// A real etcd with auth on, whose user for the arbiter has no role: every
// call is refused, and the arbiter says so rather than claim quorum loss.
func TestAnArbiterEtcdRefusesIsStoreAuthNotNoQuorum(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cluster, root := startOne(t, ctx, etcdembed.Config{})
	if _, err := root.RoleAdd(ctx, "root"); err != nil && !strings.Contains(err.Error(), rpctypes.ErrRoleAlreadyExist.Error()) {
		t.Fatal(err)
	}
	for _, step := range []func() error{
		func() error { _, err := root.UserAdd(ctx, "root", "root-pw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := root.UserAdd(ctx, "arbiter", "arbiter-pw"); return err },
		func() error { _, err := root.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		Username: "arbiter", Password: "arbiter-pw"})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	a, err := New(Config{Etcd: cli, AllowAnyWorkload: true})
	if err != nil {
		t.Fatal(err)
	}
	err = a.Ready(ctx)
	if reason.Of(err) != lockv1.ErrorReason_STORE_AUTH {
		t.Fatalf("an arbiter whose etcd user has no role: %v (reason %s), want STORE_AUTH", err, reason.Of(err))
	}
	t.Logf("etcd refusing the arbiter's role: %v", err)
}

// A real etcd whose request limit is small: a grant of a long key is
// refused as too large, while a short one is granted: the cluster is fine.
func TestARequestEtcdFindsTooLargeIsRequestTooLarge(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, cli := startOne(t, ctx, etcdembed.Config{MaxRequestBytes: 1500})
	a := readyArbiter(t, ctx, cli)
	id := spiffeid.RequireFromString("spiffe://t/holder")
	cls := class.Default
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, lockkey.SessionKey(int64(lease.ID)), sessionFor(id, cls.TTL, "").Encode(), clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	req := func(key string) request {
		return request{caller: id, key: key, class: cls, labels: labels{namespace: "team-a", class: cls.Name, tier: string(cls.Tier), cluster: "default"}}
	}
	if _, err := a.attempt(ctx, req("team-a/short/1"), int64(lease.ID)); err != nil {
		t.Fatalf("a short key: %v", err)
	}
	long := "team-a/" + strings.Repeat("x", lockkey.MaxLen-len("team-a/"))
	_, err = a.attempt(ctx, req(long), int64(lease.ID))
	if reason.Of(err) != lockv1.ErrorReason_REQUEST_TOO_LARGE {
		t.Fatalf("a grant over etcd's request limit: %v (reason %s), want REQUEST_TOO_LARGE", err, reason.Of(err))
	}
	t.Logf("a %d-byte key's grant over a 1500-byte request limit: %v", len(long), err)
}
