package arbiter_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	adminv1 "github.com/lockplane/lockplane/services/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/lockplane/lockplane/services/token"
	clientv3 "go.etcd.io/etcd/client/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// A real disaster recovery: snapshot, more grants, restore the snapshot into
// a new cluster with etcdutl. The restored cluster's revisions are behind
// tokens already handed out, and only the seal stops it repeating them.
func TestRestoredClusterIsSealedUntilEpochAdvances(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	orig := devenvtest.Start(t, devenv.Options{})
	s := devenvtest.Session(t, devenvtest.Client(t, orig, "demo"), "")
	var issued []token.Token
	grant := func(n int) {
		for i := 0; i < n; i++ {
			h, err := s.TryLock(ctx, fmt.Sprintf("team-a/dr/%d", len(issued)), noFence)
			if err != nil {
				t.Fatal(err)
			}
			issued = append(issued, h.Token())
		}
	}
	grant(5)
	snap := filepath.Join(t.TempDir(), "backup.db")
	if err := orig.Cluster.Snapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	grant(20) // handed out after the backup: the restore forgets them
	highest := issued[len(issued)-1]

	restored := devenvtest.Start(t, devenv.Options{RestoreFrom: snap})
	rs, err := restored.Etcd.Get(ctx, lockkey.EpochKey)
	if err != nil {
		t.Fatal(err)
	}
	if rs.Header.Revision >= highest.Revision() {
		t.Fatalf("restored revision %d is not behind the last token's %d: the test would prove nothing", rs.Header.Revision, highest.Revision())
	}
	demo := devenvtest.Client(t, restored, "demo")
	alice := devenvtest.Client(t, restored, "alice")
	admin := adminv1.NewAdminServiceClient(alice.Conn())

	health := healthpb.NewHealthClient(demo.Conn())
	serving := func() healthpb.HealthCheckResponse_ServingStatus {
		r, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: lockv1.LockService_ServiceDesc.ServiceName})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus()
	}
	if got := serving(); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health of a sealed arbiter: %s, want NOT_SERVING", got)
	}

	// Sealed: no session, no grant, and status says why.
	_, err = demo.Session(ctx, "")
	wantReason(t, err, lockv1.ErrorReason_SEALED)
	st, err := admin.Status(ctx, &adminv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !st.GetSealed() || st.GetEpochClusterId() == st.GetClusterId() {
		t.Fatalf("status of a restored cluster: sealed=%v epoch cluster %s, cluster %s", st.GetSealed(), st.GetEpochClusterId(), st.GetClusterId())
	}
	// A grant forged straight into etcd would still be refused by the
	// arbiter, and an old session restored with the snapshot is refused too.
	_, err = raw(demo).Acquire(ctx, &lockv1.AcquireRequest{Key: "team-a/dr/new", SessionId: s.ID()})
	wantReason(t, err, lockv1.ErrorReason_SEALED)

	// Nor is a restored session renewed.
	ka, err := raw(demo).KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ka.Send(&lockv1.KeepAliveRequest{SessionId: s.ID()}); err != nil {
		t.Fatal(err)
	}
	if r, err := ka.Recv(); err != nil || r.GetError() != lockv1.ErrorReason_SEALED || r.GetTtl() != nil {
		t.Fatalf("keepalive of a restored session: %v %v, want SEALED", r, err)
	}
	ka.CloseSend()

	// Only an operator may advance, and only from the epoch they saw.
	_, err = adminv1.NewAdminServiceClient(demo.Conn()).AdvanceEpoch(ctx, &adminv1.AdvanceEpochRequest{ExpectedEpoch: st.GetEpoch(), Reason: "restore"})
	wantReason(t, err, lockv1.ErrorReason_PERMISSION_DENIED)
	_, err = admin.AdvanceEpoch(ctx, &adminv1.AdvanceEpochRequest{ExpectedEpoch: st.GetEpoch() + 1, Reason: "restore"})
	wantReason(t, err, lockv1.ErrorReason_EPOCH_CHANGED)
	// The backup came from one member, which may not have applied the last
	// grants yet: count what was restored rather than assume it.
	before, _ := restored.Etcd.Get(ctx, lockkey.HoldPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if before.Count == 0 {
		t.Fatal("no holds were restored: the test would prove nothing")
	}
	adv, err := admin.AdvanceEpoch(ctx, &adminv1.AdvanceEpochRequest{ExpectedEpoch: st.GetEpoch(), Reason: "restored from backup.db"})
	if err != nil {
		t.Fatal(err)
	}
	if adv.GetEpoch() != st.GetEpoch()+1 || adv.GetClusterId() != st.GetClusterId() || adv.GetDeletedHolds() != before.Count {
		t.Fatalf("advance = %v; want epoch %d bound to %s with the %d restored holds deleted", adv, st.GetEpoch()+1, st.GetClusterId(), before.Count)
	}
	left, _ := restored.Etcd.Get(ctx, lockkey.HoldPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if left.Count != 0 {
		t.Fatalf("%d restored holds survived the advance", left.Count)
	}

	if got := serving(); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health after the advance: %s, want SERVING", got)
	}

	// Unsealed: every new token exceeds every token the old cluster issued,
	// although the revisions went back.
	ns := devenvtest.Session(t, demo, "")
	for i := 0; i < 5; i++ {
		h, err := ns.TryLock(ctx, fmt.Sprintf("team-a/dr/%d", i), noFence)
		if err != nil {
			t.Fatal(err)
		}
		if h.Token() <= highest || h.Token().Epoch() != adv.GetEpoch() {
			t.Fatalf("token after the advance %v does not exceed the old cluster's highest %v", h.Token(), highest)
		}
		if h.Token().Revision() >= highest.Revision() {
			continue
		}
		t.Logf("revision %d is behind the old %d, yet the token is higher: %v > %v", h.Token().Revision(), highest.Revision(), h.Token(), highest)
	}
}
