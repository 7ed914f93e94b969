package etcdauth_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/election"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/etcdauth"
	"github.com/lockplane/lockplane/services/internal/etcdembed"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/lockplane/lockplane/services/shardmap"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// recorded is an admin client whose KV requests are recorded; watches
// pass through.
type recorded struct {
	*etcdauth.Recorder
	clientv3.Watcher
}

// keyOn finds a key whose range moves (or not) when shard s2 is added to a
// map over s1.
func keyOn(moving bool) string {
	m := shardmap.Map{Version: 2, Shards: []string{"s1"}, Adding: "s2"}
	for i := 0; ; i++ {
		if k := fmt.Sprintf("team/r%d/x", i); m.Moving(k) == moving {
			return k
		}
	}
}

// The Admin API's library paths, run as the admin user against clusters
// with auth on, are allowed by etcd; every range they touch is within the
// admin role (without admin-sessions), every delete is under /l/ or /q/
// (the epoch advance's and the shard add's) or is the advance's delete of
// every session record, and every put is under /sys/. The same paths as the
// arbiter are refused by etcd, shard map initialisation included.
func TestTheAdminPathsStayInsideTheAdminRole(t *testing.T) {
	spec := testSpec()
	nodes := map[string]*etcdembed.Cluster{}
	for _, name := range []string{"coord", "s1", "s2"} {
		nodes[name] = start(t, spec)
	}
	as := func(user string) map[string]*clientv3.Client {
		out := map[string]*clientv3.Client{}
		for name, c := range nodes {
			out[name] = client(t, c, user)
		}
		return out
	}
	root, arb, clusters := as(etcdauth.RootUser), as(etcdauth.Arbiter), as(etcdauth.Admin)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// The bootstrap is root's: the epochs, then the shard map. The
	// arbiter's own attempt at the map (routeTable.ensure) is refused.
	if _, err := epoch.BootstrapRegion(ctx, root["coord"], "coord", map[string]clientv3.KV{"s1": root["s1"], "s2": root["s2"]}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := shardmap.Init(ctx, shardmap.Clusters{Coord: arb["coord"], Shards: map[string]shardmap.Etcd{"s1": arb["s1"]}}, []string{"s1"}, nil); !refused(err) {
		t.Fatalf("shard map init as the arbiter: %v, want refused by etcd", err)
	}
	if _, err := shardmap.Init(ctx, shardmap.Clusters{Coord: root["coord"], Shards: map[string]shardmap.Etcd{"s1": root["s1"]}}, []string{"s1"}, nil); err != nil {
		t.Fatal(err)
	}

	// The arbiter holds a key that stays on s1 and waits on one that moves.
	lease, err := arb["s1"].Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	stays, moves := keyOn(false), keyOn(true)
	for _, k := range []string{lockkey.SessionKey(int64(lease.ID)), lockkey.HoldKey(stays), lockkey.WaitKey(moves, int64(lease.ID))} {
		if _, err := arb["s1"].Put(ctx, k, "x", clientv3.WithLease(lease.ID)); err != nil {
			t.Fatalf("the arbiter's put of %s: %v", k, err)
		}
	}

	// The admin path: add s2 (stamps, drains the moving waiter, advances
	// s2, stores the map), then advance s1's epoch (deletes the hold).
	recs := map[string]*etcdauth.Recorder{}
	shards := map[string]shardmap.Etcd{}
	for name, cli := range clusters {
		recs[name] = etcdauth.NewRecorder(cli)
		if name != "coord" {
			shards[name] = recorded{recs[name], cli}
		}
	}
	adminClusters := shardmap.Clusters{Coord: recorded{recs["coord"], clusters["coord"]}, Shards: shards}
	m, err := shardmap.Add(ctx, adminClusters, "s2", "test: the admin role may move ranges", nil)
	if err != nil {
		t.Fatalf("shard add as the admin: %v", err)
	}
	if m.Version != 3 || len(m.Shards) != 2 {
		t.Fatalf("shard add: map %+v", m)
	}
	if resp, err := root["s1"].Get(ctx, lockkey.WaitKey(moves, int64(lease.ID))); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("the moving range's waiter: %v, %v; want it drained", resp, err)
	}
	st, _, err := epoch.Read(ctx, root["s1"])
	if err != nil {
		t.Fatal(err)
	}
	// As the arbiter, the advance is refused (its allocation on the
	// coord cluster first) and changes nothing.
	if _, err := epoch.Advance(ctx, arb["coord"], arb["s1"], epoch.Change{Cluster: "s1", Expected: st.Epoch, Reason: "test"}); !refused(err) {
		t.Fatalf("epoch advance as the arbiter: %v, want refused by etcd", err)
	}
	adv, err := epoch.Advance(ctx, recs["coord"], recs["s1"], epoch.Change{Cluster: "s1", Expected: st.Epoch, Reason: "test"})
	if err != nil {
		t.Fatalf("epoch advance as the admin: %v", err)
	}
	if adv.DeletedHolds != 1 {
		t.Fatalf("the advance deleted %d holds, want 1", adv.DeletedHolds)
	}

	// What the admin paths did, request by request.
	var puts, deletes, sessionDeletes int
	writes := map[string]bool{}
	adminRole, _ := spec.Role(etcdauth.Admin)
	for name, r := range recs {
		for _, u := range r.Uses() {
			if u.Writes() {
				writes[fmt.Sprintf("%s %s %q..%q", name, u.Op, u.Key, u.End)] = true
			}
			// The admin role alone, without admin-sessions: a deployment
			// that drops --revoke-session still advances epochs.
			if !adminRole.Allows(u) {
				t.Errorf("%s: %s %q..%q is outside the admin role", name, u.Op, u.Key, u.End)
			}
			switch u.Op {
			case "delete":
				deletes++
				if u.Key == lockkey.SessionPrefix && u.End == clientv3.GetPrefixRangeEnd(lockkey.SessionPrefix) {
					sessionDeletes++ // the epoch advance ends every session on the cluster
					break
				}
				if !strings.HasPrefix(u.Key, lockkey.HoldPrefix) && !strings.HasPrefix(u.Key, lockkey.WaitPrefix) {
					t.Errorf("%s: the admin path deleted %q..%q, outside /l/, /q/ and the whole of /s/", name, u.Key, u.End)
				}
				if u.End != "" && u.End != clientv3.GetPrefixRangeEnd(lockkey.HoldPrefix) && u.End != clientv3.GetPrefixRangeEnd(lockkey.WaitPrefix) {
					t.Errorf("%s: the admin path deleted the range %q..%q, wider than /l/ or /q/", name, u.Key, u.End)
				}
			case "put":
				puts++
				if !strings.HasPrefix(u.Key, "/sys/") {
					t.Errorf("%s: the admin path put %q, outside /sys/", name, u.Key)
				}
			}
		}
	}
	t.Logf("the admin paths' writes: %v", slices.Sorted(maps.Keys(writes)))
	if puts == 0 || deletes == 0 {
		t.Fatalf("recorded %d puts and %d deletes: the recorder saw nothing", puts, deletes)
	}
	if sessionDeletes == 0 {
		t.Fatal("the epoch advance deleted no session record: sessions opened before it would outlive it")
	}
}

// The tailer campaigns, checkpoints under its election and watches the
// whole key space as the tailer user.
func TestTheTailerRunsAsTheTailerUser(t *testing.T) {
	c := start(t, testSpec())
	cli := client(t, c, etcdauth.Tailer)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	el := election.Election{Coord: cli, Prefix: audit.ElectionPrefix + "c1", Name: "t1", TTL: 5 * time.Second, OpTimeout: 5 * time.Second}
	err := el.Lead(ctx, func(ctx context.Context, leader clientv3.Cmp) error {
		resp, err := cli.Txn(ctx).If(leader).Then(clientv3.OpPut(audit.CheckpointPrefix+"c1", `{"revision":1}`)).Commit()
		if err != nil || !resp.Succeeded {
			return fmt.Errorf("checkpoint under the election: %v, %v", resp, err)
		}
		return watch("/", clientv3.WithPrefix())(ctx, cli, fixture{})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// refused reports etcd's permission refusal, however wrapped.
func refused(err error) bool {
	return errors.Is(err, rpctypes.ErrPermissionDenied) || err != nil && strings.Contains(err.Error(), rpctypes.ErrPermissionDenied.Error())
}
