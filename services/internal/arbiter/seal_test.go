package arbiter_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/internal/arbiter"
	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// A real disaster recovery: snapshot, more grants, restore the snapshot into
// a new cluster with etcdutl. The restored cluster's revisions are behind
// tokens already handed out, and only the seal stops it repeating them.
func TestRestoredClusterIsSealedUntilEpochAdvances(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	// Short TTLs: the advance's quiet period, if a restored session still
	// lived, is a few seconds.
	orig := devenvtest.Start(t, devenv.Options{Classes: quietClasses()})
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

	restored := devenvtest.Start(t, devenv.Options{RestoreFrom: snap, EtcdAuth: &orig.EtcdAuth, Classes: quietClasses()})
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
	if v := sealedGauge(t, restored); v != 1 {
		t.Fatalf("lockplane_cluster_sealed of a restored cluster: %v, want 1", v)
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
	// A grant forged straight into etcd is refused by the arbiter: a rogue
	// writer puts a hold record, in the arbiter's own format, on a lease of
	// its own. Its revision is one the old cluster already issued tokens
	// around, so honouring it could repeat a token.
	forged, rogue := forgeHold(t, ctx, restored, "team-a/dr/forged", "other", st.GetEpoch())
	if forged > highest {
		t.Fatalf("forged token %v is above the old cluster's highest %v: the test would prove nothing", forged, highest)
	}
	t.Logf("forged hold at %v; the old cluster issued this very token: %v", forged, slices.Contains(issued, forged))
	_, err = raw(demo).ValidateToken(ctx, &lockv1.ValidateTokenRequest{Key: "team-a/dr/forged", Token: uint64(forged)})
	wantReason(t, err, lockv1.ErrorReason_SEALED)
	_, err = raw(demo).Inspect(ctx, &lockv1.InspectRequest{Key: "team-a/dr/forged"})
	wantReason(t, err, lockv1.ErrorReason_SEALED)
	_, err = raw(devenvtest.Client(t, restored, "other")).Release(ctx, &lockv1.ReleaseRequest{Key: "team-a/dr/forged", SessionId: rogue, Token: uint64(forged)})
	wantReason(t, err, lockv1.ErrorReason_SEALED)
	// An old session restored with the snapshot is refused too.
	_, err = raw(demo).Acquire(ctx, &lockv1.AcquireRequest{Key: "team-a/dr/new", SessionId: s.ID(), Instance: s.Instance()})
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
	// The restored coord cluster's allocation records predate whatever it
	// allocated after the backup: the operator names the highest epoch the
	// region served (here the backup's own: nothing advanced since).
	_, err = admin.AdvanceEpoch(ctx, &adminv1.AdvanceEpochRequest{ExpectedEpoch: st.GetEpoch(), Reason: "restore"})
	wantReason(t, err, lockv1.ErrorReason_INVALID_ARGUMENT)
	above := st.GetEpoch()
	_, err = admin.AdvanceEpoch(ctx, &adminv1.AdvanceEpochRequest{ExpectedEpoch: st.GetEpoch() + 1, Reason: "restore", Above: &above})
	wantReason(t, err, lockv1.ErrorReason_EPOCH_CHANGED)
	// The backup came from one member, which may not have applied the last
	// grants yet: count what was restored rather than assume it.
	before, _ := restored.Etcd.Get(ctx, lockkey.HoldPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if before.Count == 0 {
		t.Fatal("no holds were restored: the test would prove nothing")
	}
	adv, err := admin.AdvanceEpoch(ctx, &adminv1.AdvanceEpochRequest{ExpectedEpoch: st.GetEpoch(), Reason: "restored from backup.db", Above: &above})
	if err != nil {
		t.Fatal(err)
	}
	if adv.GetEpoch() != st.GetEpoch()+1 || adv.GetClusterId() != st.GetClusterId() || adv.GetDeletedHolds() != before.Count {
		t.Fatalf("advance = %v; want epoch %d bound to %s with the %d restored holds deleted", adv, st.GetEpoch()+1, st.GetClusterId(), before.Count)
	}
	left, _ := restored.Etcd.Get(ctx, lockkey.HoldPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if left.Count != 0 {
		t.Fatalf("%d restored or forged holds survived the advance", left.Count)
	}
	// The forged grant went with the advance, and its token is of an
	// earlier epoch for good.
	v, err := raw(demo).ValidateToken(ctx, &lockv1.ValidateTokenRequest{Key: "team-a/dr/forged", Token: uint64(forged)})
	if err != nil || v.GetValid() || v.GetState() != lockv1.TokenState_TOKEN_STATE_EARLIER_EPOCH {
		t.Fatalf("the forged token after the advance: %v %v, want EARLIER_EPOCH", v, err)
	}

	if got := serving(); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health after the advance: %s, want SERVING", got)
	}
	if v := sealedGauge(t, restored); v != 0 {
		t.Fatalf("lockplane_cluster_sealed after the advance: %v, want 0", v)
	}

	// Unsealed: every new token exceeds every token the old cluster issued,
	// although the revisions went back.
	ns := devenvtest.Session(t, demo, "")
	waitOutTheQuiet(t, restored.Etcd, ns, "team-a/dr/quiet", false)
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

// On a cluster that is not sealed, a hold forged into etcd is not refused:
// the arbiter cannot tell it from a grant it made (the defence is that only
// arbiters hold an etcd write credential, ADR-18). What it does guarantee:
// it never grants the key over the forged hold, another session's release
// naming its token never ends it, and an epoch advance removes it.
func TestAHoldForgedIntoALiveClusterIsNeverGrantedOver(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{Classes: quietClasses()})
	ctx := ctxT(t, 30*time.Second)
	const key = "team-a/forged/1"
	admin := adminv1.NewAdminServiceClient(devenvtest.Client(t, env, "alice").Conn())
	st, err := admin.Status(ctx, &adminv1.StatusRequest{})
	if err != nil || st.GetSealed() {
		t.Fatalf("status: %v %v, want an unsealed cluster", st, err)
	}
	forged, rogue := forgeHold(t, ctx, env, key, "other", st.GetEpoch())
	demo := devenvtest.Client(t, env, "demo")
	s := devenvtest.Session(t, demo, "")

	_, err = raw(demo).Acquire(ctx, &lockv1.AcquireRequest{Key: key, SessionId: s.ID(), Instance: s.Instance()})
	wantReason(t, err, lockv1.ErrorReason_CONTENDED)
	r, err := raw(demo).Release(ctx, &lockv1.ReleaseRequest{Key: key, SessionId: s.ID(), Token: uint64(forged)})
	if err != nil || r.GetReleased() {
		t.Fatalf("another session's release of the forged token: released=%v err=%v", r.GetReleased(), err)
	}
	hold, err := env.Etcd.Get(ctx, lockkey.HoldKey(key))
	if err != nil || len(hold.Kvs) != 1 || hold.Kvs[0].ModRevision != forged.Revision() || hold.Kvs[0].Lease != rogue {
		t.Fatalf("the forged hold was changed: %v (err %v)", hold.Kvs, err)
	}
	// Not refused: say what the arbiter makes of it.
	v, verr := raw(demo).ValidateToken(ctx, &lockv1.ValidateTokenRequest{Key: key, Token: uint64(forged)})
	in, ierr := raw(demo).Inspect(ctx, &lockv1.InspectRequest{Key: key})
	t.Logf("a forged hold on a live cluster: ValidateToken %s valid=%v (err %v); Inspect held=%v by %s (err %v)",
		v.GetState(), v.GetValid(), verr, in.GetHeld(), in.GetHolder().GetIdentity(), ierr)

	adv, err := admin.AdvanceEpoch(ctx, &adminv1.AdvanceEpochRequest{ExpectedEpoch: st.GetEpoch(), Reason: "test: remove a forged hold"})
	if err != nil || adv.GetDeletedHolds() != 1 {
		t.Fatalf("advance: %v %v, want the forged hold deleted", adv, err)
	}
	// The advance ended s, which was alive: a new session, once the quiet
	// period is over (a client of its own: demo's lease may not have heard).
	s = devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "")
	waitOutTheQuiet(t, env.Etcd, s, "team-a/forged/quiet", true)
	g, err := raw(demo).Acquire(ctx, &lockv1.AcquireRequest{Key: key, SessionId: s.ID(), Instance: s.Instance()})
	if err != nil {
		t.Fatal(err)
	}
	if tok := token.Token(g.Token.Value); tok <= forged || tok.Epoch() != adv.GetEpoch() {
		t.Fatalf("granted %v after the advance to epoch %d; the forged hold was %v", tok, adv.GetEpoch(), forged)
	}
}

// forgeHold writes a hold of key straight into env's etcd, as a rogue writer
// with etcd credentials would: the arbiter's record format, claiming the
// named development identity, on a lease of the rogue's own. It returns the
// token such a grant would carry in epoch ep, and the lease.
func forgeHold(t *testing.T, ctx context.Context, env *devenv.Env, key, who string, ep uint32) (token.Token, int64) {
	t.Helper()
	lease, err := env.Etcd.Grant(ctx, 300)
	if err != nil {
		t.Fatal(err)
	}
	rec := arbiter.EncodeHold(env.Profile.Identities[who].SPIFFEID, int64(lease.ID), class.DefaultName, time.Now().UTC())
	put, err := env.Etcd.Put(ctx, lockkey.HoldKey(key), rec, clientv3.WithLease(lease.ID))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := token.Mint(ep, put.Header.Revision)
	if err != nil {
		t.Fatal(err)
	}
	return tok, int64(lease.ID)
}

// sealedGauge is the one lockplane_cluster_sealed sample env exports.
func sealedGauge(t *testing.T, env *devenv.Env) float64 {
	t.Helper()
	fams, err := env.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "lockplane_cluster_sealed" && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no lockplane_cluster_sealed sample")
	return -1
}
