package arbiter_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/shardmap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The two-person shard add against real etcd: alice requests with a
// reason, nothing moves; alice cannot approve her own request; bob's
// approval runs the add (the new map, shard b's epoch above a's), the
// outcome reads back through GetAction and ListActions, and a second
// approval is refused.
func TestShardAddIsTwoPerson(t *testing.T) {
	env := signedInShards(t)
	ctx := ctxT(t, 2*time.Minute)
	admin := adminOf(t, env)

	_, err := admin.RequestShardAdd(as(ctx, "tok-alice"), &adminv1.RequestShardAddRequest{Add: &adminv1.AddShardRequest{Shard: "b"}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "reason") {
		t.Fatalf("a request without a reason: %v, want INVALID_ARGUMENT naming reason", err)
	}
	_, err = admin.RequestShardAdd(as(ctx, "tok-alice"), &adminv1.RequestShardAddRequest{Add: &adminv1.AddShardRequest{Shard: "b", Reason: "more\u2028room"}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "reason") {
		t.Fatalf("a reason with a line separator: %v, want INVALID_ARGUMENT naming reason", err)
	}
	_, err = admin.RequestShardAdd(as(ctx, "tok-alice"), &adminv1.RequestShardAddRequest{Add: &adminv1.AddShardRequest{Shard: "z", Reason: "more room"}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "shard") {
		t.Fatalf("a request for an unknown shard: %v, want INVALID_ARGUMENT naming shard", err)
	}
	req, err := admin.RequestShardAdd(as(ctx, "tok-alice"), &adminv1.RequestShardAddRequest{Add: &adminv1.AddShardRequest{Shard: "b", Reason: "more room"}})
	if err != nil {
		t.Fatal(err)
	}
	act := req.GetAction()
	if act.GetKind() != "shard_add" || act.GetState() != "pending" || act.GetShardAdd().GetShard() != "b" || len(act.GetWarnings()) == 0 {
		t.Fatalf("request = %v", act)
	}
	if m, _, _, err := shardmap.Load(ctx, env.Etcd); err != nil || m.Version != 1 || m.Adding != "" {
		t.Fatalf("the map after a request alone: %+v (err %v), want version 1 untouched", m, err)
	}

	_, err = admin.ApproveAction(as(ctx, "tok-alice"), &adminv1.ApproveActionRequest{Id: act.GetId()})
	wantCause(t, err, lockv1.ErrorReason_PERMISSION_DENIED, "same_operator")
	if m, _, _, err := shardmap.Load(ctx, env.Etcd); err != nil || m.Version != 1 || m.Adding != "" {
		t.Fatalf("the map after the requester's own approval was refused: %+v (err %v)", m, err)
	}

	r, err := admin.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: act.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if r.GetAction().GetState() != "approved" || r.GetShardAdd().GetVersion() != 3 || !slices.Equal(r.GetShardAdd().GetShards(), []string{"a", "b"}) ||
		len(r.GetShardAdd().GetSteps()) == 0 {
		t.Fatalf("approve = %v", r)
	}
	m, _, _, err := shardmap.Load(ctx, env.Etcd)
	if err != nil || m.Version != 3 || !slices.Equal(m.Shards, []string{"a", "b"}) || m.Adding != "" {
		t.Fatalf("the stored map after the approval: %+v (err %v)", m, err)
	}
	sa, _, err := epoch.Read(ctx, env.ShardEtcd["a"])
	if err != nil {
		t.Fatal(err)
	}
	if sb, found, err := epoch.Read(ctx, env.ShardEtcd["b"]); err != nil || !found || sb.Epoch <= sa.Epoch || sb.MapVersion != 3 {
		t.Fatalf("shard b's epoch record %+v (found %t, err %v), want above a's %d at map version 3", sb.Record, found, err, sa.Epoch)
	}

	got, err := admin.GetAction(as(ctx, "tok-alice"), &adminv1.GetActionRequest{Id: act.GetId()})
	if err != nil || got.GetAction().GetState() != "approved" || got.GetAction().GetDecidedBy().GetName() != "bob" ||
		got.GetAction().GetShardAddResult().GetVersion() != 3 {
		t.Fatalf("the action read back: %v (err %v)", got.GetAction(), err)
	}
	list, err := admin.ListActions(as(ctx, "tok-bob"), &adminv1.ListActionsRequest{Kind: "shard_add"})
	if err != nil || len(list.GetActions()) != 1 || list.GetActions()[0].GetId() != act.GetId() {
		t.Fatalf("list = %v (err %v), want the one shard add", list, err)
	}
	_, err = admin.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: act.GetId()})
	wantCause(t, err, lockv1.ErrorReason_ACTION_STALE, "action_approved")
	_, err = admin.RequestShardAdd(as(ctx, "tok-alice"), &adminv1.RequestShardAddRequest{Add: &adminv1.AddShardRequest{Shard: "b", Reason: "again"}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "already in map") {
		t.Fatalf("a request for a shard in the map: %v, want INVALID_ARGUMENT", err)
	}
}
