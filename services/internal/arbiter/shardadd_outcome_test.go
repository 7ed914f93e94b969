package arbiter_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/internal/arbiter"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/lockplane/lockplane/services/shardmap"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// requestShardAdd is alice's request to add shard b; its ID.
func requestShardAdd(t *testing.T, ctx context.Context, admin adminv1.AdminServiceClient, shard string) string {
	t.Helper()
	r, err := admin.RequestShardAdd(as(ctx, "tok-alice"), &adminv1.RequestShardAddRequest{Add: &adminv1.AddShardRequest{Shard: shard, Reason: "more room"}})
	if err != nil {
		t.Fatal(err)
	}
	return r.GetAction().GetId()
}

// stateOf is request id's state as GetAction reads it back.
func stateOf(t *testing.T, ctx context.Context, admin adminv1.AdminServiceClient, id string) string {
	t.Helper()
	got, err := admin.GetAction(as(ctx, "tok-alice"), &adminv1.GetActionRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	return got.GetAction().GetState()
}

// strandedHold puts a hold of key on cl on a lease of ttl that nothing
// renews: to the add, a holder that stopped and whose session expires.
func strandedHold(t *testing.T, ctx context.Context, cl *clientv3.Client, key string, ttl time.Duration) clientv3.LeaseID {
	t.Helper()
	lease, err := cl.Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Put(ctx, lockkey.HoldKey(key), arbiter.EncodeHold("spiffe://lockplane.test/demo", int64(lease.ID), entity.Name, time.Now()),
		clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	return lease.ID
}

// An approved shard add waits for the moving ranges' holders under a
// budget of its own (issue 32): run out, it reads back and records the
// request pending, saying to approve again, and approving again resumes
// it; a holder whose session expires after the approval's ordinary bound
// ((10+shards) × op timeout, 12 s here) no longer leaves the request
// executing with its outcome unknown.
func TestShardAddApprovalHasItsOwnBudget(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{Operators: operators, Shards: []string{"a", "b"}, InitialShards: []string{"a"},
		Classes: class.NewStatic(devenvtest.Fast, entity), OpTimeout: time.Second})
	ctx := ctxT(t, 3*time.Minute)
	adm := adminOf(t, env)
	m, _, _, err := shardmap.Load(ctx, env.Etcd)
	if err != nil {
		t.Fatal(err)
	}
	moving, _ := movingKey(m, "b")
	lease := strandedHold(t, ctx, env.ShardEtcd["a"], moving, time.Minute)

	id := requestShardAdd(t, ctx, adm, "b")
	wait := 2 * time.Second
	env.Router.SetTestHooks(&arbiter.TestHooks{ShardAddWait: &wait})
	_, err = adm.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: id})
	env.Router.SetTestHooks(nil)
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "again to resume") {
		t.Fatalf("an approval that ran out waiting for a holder: %v, want DEADLINE_EXCEEDED saying to approve again", err)
	}
	if st := stateOf(t, ctx, adm, id); st != "pending" {
		t.Fatalf("after an approval that ran out waiting for a holder the request is %s, want pending (to approve again)", st)
	}

	// The holder's session now expires 16 s on: after the approval's
	// ordinary bound, well within its own.
	if _, err := env.ShardEtcd["a"].Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	strandedHold(t, ctx, env.ShardEtcd["a"], moving, 16*time.Second)
	start := time.Now()
	r, err := adm.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: id})
	if err != nil {
		t.Fatalf("approving again after %s: %v (request %s)", time.Since(start).Round(time.Second), err, stateOf(t, ctx, adm, id))
	}
	if r.GetAction().GetState() != "approved" || r.GetShardAdd().GetVersion() != 3 || !slices.Equal(r.GetShardAdd().GetShards(), []string{"a", "b"}) {
		t.Fatalf("approve again = %v", r)
	}
	t.Logf("the add waited %s for the holder", time.Since(start).Round(time.Second))
}

// failingGet fails the first Get of key once armed: the coord cluster not
// answering one read of the add's last step.
type failingGet struct {
	arbiter.Etcd
	key   string
	armed *atomic.Bool
}

func (f failingGet) Get(ctx context.Context, k string, o ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if k == f.key && f.armed.CompareAndSwap(true, false) {
		return nil, errors.New("test: no answer from the coord cluster")
	}
	return f.Etcd.Get(ctx, k, o...)
}

// A shard add's outcome is its own request's (issue 32): stored but not
// yet stamped on every shard, it is not done, and approving again
// finishes the stamping; the shard in the map by another request's add is
// not this request's success, and an approval of it is refused as stale.
func TestShardAddOutcomeIsTheRequestsOwn(t *testing.T) {
	var armed atomic.Bool
	env := devenvtest.Start(t, devenv.Options{Operators: operators, Shards: []string{"a", "b"}, InitialShards: []string{"a"},
		Classes: class.NewStatic(devenvtest.Fast, entity),
		WrapAdminEtcd: func(e arbiter.Etcd) arbiter.Etcd {
			return failingGet{Etcd: e, key: epoch.HighestPrefix + "a", armed: &armed}
		}})
	ctx := ctxT(t, 2*time.Minute)
	adm := adminOf(t, env)
	first, second := requestShardAdd(t, ctx, adm, "b"), requestShardAdd(t, ctx, adm, "b")

	// The map is stored, then recording shard a's epoch fails: shard b is
	// not stamped with the new map and would refuse its grants.
	armed.Store(true)
	r, err := adm.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: first})
	b, _, rerr := epoch.Read(ctx, env.ShardEtcd["b"])
	if rerr != nil {
		t.Fatal(rerr)
	}
	if err == nil && b.MapVersion != 3 {
		t.Fatalf("approved (%v) with shard b still stamped with map version %d, not 3: its grants are refused", r.GetAction().GetState(), b.MapVersion)
	}
	if err == nil || stateOf(t, ctx, adm, first) != "pending" {
		t.Fatalf("an add stopped before stamping every shard: %v, request %s, want an error and pending", err, stateOf(t, ctx, adm, first))
	}
	r, err = adm.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: first})
	if err != nil || r.GetAction().GetState() != "approved" || r.GetShardAdd().GetVersion() != 3 {
		t.Fatalf("approving again: %v (err %v)", r, err)
	}
	for _, s := range []string{"a", "b"} {
		if st, _, err := epoch.Read(ctx, env.ShardEtcd[s]); err != nil || st.MapVersion != 3 {
			t.Fatalf("shard %s stamped with map version %d (err %v), want 3", s, st.MapVersion, err)
		}
	}

	// The second request asked for the same shard; it did not add it.
	_, err = adm.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: second})
	wantCause(t, err, lockv1.ErrorReason_ACTION_STALE, "shard_in_map")
	if st := stateOf(t, ctx, adm, second); st != "failed" {
		t.Fatalf("a request for a shard another request added is %s, want failed", st)
	}
	list, err := adm.ListActions(as(ctx, "tok-bob"), &adminv1.ListActionsRequest{})
	if err != nil || len(list.GetActions()) != 2 {
		t.Fatalf("list = %v (err %v), want the two requests and nothing else", list, err)
	}
}

// A shard add that can never be carried out (another shard is being
// added) is refused as stale and the request fails, instead of going back
// to pending for ever (issue 32).
func TestShardAddBehindAnotherAddIsStale(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{Operators: operators, Shards: []string{"a", "b", "c"}, InitialShards: []string{"a"},
		Classes: class.NewStatic(devenvtest.Fast, entity)})
	ctx := ctxT(t, time.Minute)
	adm := adminOf(t, env)
	id := requestShardAdd(t, ctx, adm, "b")
	if err := shardmap.Store(ctx, env.Etcd, 1, shardmap.Map{Version: 2, Shards: []string{"a"}, Adding: "c"}); err != nil {
		t.Fatal(err)
	}
	_, err := adm.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: id})
	wantCause(t, err, lockv1.ErrorReason_ACTION_STALE, "shard_add_in_progress")
	if st := stateOf(t, ctx, adm, id); st != "failed" {
		t.Fatalf("a shard add behind another add is %s, want failed", st)
	}
}
