package arbiter_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/shardmap"
)

// signedInShards is a coord cluster and entity shards a and b, map version
// 1 over a, behind an arbiter that verifies operators' sign-in.
func signedInShards(t *testing.T) *devenv.Env {
	return devenvtest.Start(t, devenv.Options{Operators: operators, Shards: []string{"a", "b"}, InitialShards: []string{"a"},
		Classes: class.NewStatic(devenvtest.Fast, entity)})
}

// A shard add advances the new shard's epoch and deletes holds and
// durable waiters of the moving ranges: once the arbiter verifies sign-in
// one operator alone is refused, naming the two-person flow, and nothing
// moves (issue 32).
func TestShardAddOnePersonRefusedWithSignIn(t *testing.T) {
	env := signedInShards(t)
	ctx := ctxT(t, time.Minute)
	stream, err := adminv1.NewAdminServiceClient(devenvtest.Client(t, env, "alice").Conn()).AddShard(ctx, &adminv1.AddShardRequest{Shard: "b"})
	if err == nil {
		for err == nil {
			_, err = stream.Recv()
		}
	}
	wantCause(t, err, lockv1.ErrorReason_PERMISSION_DENIED, "two_person_required")
	if !strings.Contains(err.Error(), "shards approve") {
		t.Fatalf("the refusal does not name the two-person flow: %v", err)
	}
	m, _, _, err := shardmap.Load(ctx, env.Etcd)
	if err != nil || m.Version != 1 || !slices.Equal(m.Shards, []string{"a"}) || m.Adding != "" {
		t.Fatalf("the map after a refused add: %+v (err %v), want version 1 over a", m, err)
	}
	if _, found, err := epoch.Read(ctx, env.ShardEtcd["b"]); err != nil || found {
		t.Fatalf("shard b has an epoch record after a refused add (err %v)", err)
	}
}
