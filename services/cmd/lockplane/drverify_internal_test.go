package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/lockplane/lockplane/services/shardmap"
)

// restoredOutput is a DR stack's "restored" output for one coord cluster.
func restoredOutput(clusterID string, epoch float64) map[string]any {
	return map[string]any{"coord": map[string]any{"manifest": "coord/m.json", "sourceClusterId": "old", "clusterId": clusterID,
		"revision": float64(9), "epoch": epoch, "highestAllocated": epoch}}
}

// A restore is timed from the first up that tried it, failed or not; an
// up re-run after it keeps that start; an up that restores other
// clusters starts the clock again.
func TestARestoreIsTimedFromTheFirstUpThatTriedIt(t *testing.T) {
	root := t.TempDir()
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	at := func(h int) time.Time { return t0.Add(time.Duration(h) * time.Hour) }
	check := func(step string, start time.Time, cluster string) {
		t.Helper()
		rec, err := readRestoreRecord(restoreRecordPath(root, "dr"))
		if err != nil {
			t.Fatal(err)
		}
		if !rec.StartedAt.Equal(start) || rec.Clusters["coord"] != cluster {
			t.Fatalf("%s: %+v, want the start %s and coord %q", step, rec, start, cluster)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(beginRestore(root, "dr", at(0)))
	check("the first up began", at(0), "")
	// It failed; the retry begins and succeeds.
	must(beginRestore(root, "dr", at(1)))
	must(recordRestore(root, "dr", at(1), 3, restoredOutput("c1", 3)))
	check("the retry restored", at(0), "c1")
	must(beginRestore(root, "dr", at(2)))
	must(recordRestore(root, "dr", at(2), 3, restoredOutput("c1", 3)))
	check("an up re-run over the same clusters", at(0), "c1")
	must(recordRestore(root, "dr", at(3), 5, restoredOutput("c2", 5)))
	check("another restore", at(3), "c2")
	rec, _ := readRestoreRecord(restoreRecordPath(root, "dr"))
	if rec.Floor != 5 || rec.Above != 5+EpochMargin {
		t.Fatalf("floor %d above %d, want 5 and 5+%d, the unseal's anchor", rec.Floor, rec.Above, EpochMargin)
	}
}

// verify passes only for the restored clusters, with quorum, unsealed
// above the unseal's anchor, keeps the first grant's RTO, and refuses a
// cluster sealed again.
func TestVerifyChecksTheRestoredClustersAndKeepsTheFirstRTO(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, ".lockplane", "dr")
	env := devenvtest.Start(t, devenv.Options{Dir: dir})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	op, err := env.Client("alice")
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close(ctx)
	st, err := adminv1.NewAdminServiceClient(op.Conn()).Status(ctx, &adminv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id, epoch := st.GetClusterId(), int64(st.GetEpoch())
	path := restoreRecordPath(root, "dr")
	record := func(rec restoreRecord) {
		t.Helper()
		if err := writeRestoreRecord(path, rec); err != nil {
			t.Fatal(err)
		}
	}
	verify := func(want string) verifyReport {
		t.Helper()
		rep, err := verifyRestore(ctx, root, "dr", "alice", "demo", devenvtest.Fast.Name, "team-a/dr/verify")
		switch {
		case want == "" && err != nil:
			t.Fatal(err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Fatalf("verify: %v, want an error with %q", err, want)
		}
		return rep
	}

	verify("no restore recorded")
	began := time.Now().Add(-time.Minute)
	record(restoreRecord{Stack: "dr", StartedAt: began})
	verify("the restore has not completed")
	record(restoreRecord{Stack: "dr", StartedAt: began, Clusters: map[string]string{"coord": "another"}})
	verify("not another, the one the restore made")
	// The cluster serves the anchor's epoch: not above it.
	record(restoreRecord{Stack: "dr", StartedAt: began, Above: epoch, Clusters: map[string]string{"coord": id}})
	verify("serves epoch")

	record(restoreRecord{Stack: "dr", StartedAt: began, Above: epoch - 1, Clusters: map[string]string{"coord": id}})
	rep := verify("")
	if !rep.First || rep.RTOSecs < 60 || len(rep.Clusters) != 1 || int64(rep.Grant.Epoch) != epoch {
		t.Fatalf("first verify: %+v", rep)
	}
	again := verify("")
	if again.First || again.RTO != rep.RTO || !again.FirstGrant.At.Equal(rep.Grant.At) {
		t.Fatalf("a second verify reports RTO %s (first %v), want the first verification's %s", again.RTO, again.First, rep.RTO)
	}

	// The cluster loses its epoch record: sealed, whatever was verified.
	if _, err := env.Etcd.Delete(ctx, lockkey.EpochKey); err != nil {
		t.Fatal(err)
	}
	verify("coord is still sealed")
}

// After a shard restored in place, verify checks that shard alone (the
// map's other shards were not restored) and takes its probe from it: a
// grant from another cluster, here coord's class, is refused, since it
// says nothing of the restored shard.
func TestVerifyOfAShardRestoredInPlaceTakesItsGrantFromTheShard(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, ".lockplane", "region")
	entity := class.Class{Name: "entity", TTL: 3 * time.Second, Tier: class.TierEntity, Prefixes: []string{"team-a/verify/"}}
	env := devenvtest.Start(t, devenv.Options{Dir: dir, Shards: []string{"entity-0", "entity-1"}, Classes: class.NewStatic(devenvtest.Fast, entity)})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	op, err := env.Client("alice")
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close(ctx)
	st, err := adminv1.NewAdminServiceClient(op.Conn()).Status(ctx, &adminv1.StatusRequest{Cluster: "entity-0"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := adminv1.NewAdminServiceClient(op.Conn()).ShardMap(ctx, &adminv1.ShardMapRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// A key the map homes on entity-0.
	var key string
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("team-a/verify/%d", i)
		if (shardmap.Map{Version: m.GetVersion(), Shards: m.GetShards()}).Home(k) == "entity-0" {
			key = k
		}
	}
	began := time.Now().Add(-time.Minute)
	if err := recordInPlace(root, "region", began, []restoredCluster{{name: "entity-0", clusterID: st.GetClusterId(), epoch: 0}}); err != nil {
		t.Fatal(err)
	}
	if _, err := verifyRestore(ctx, root, "region", "alice", "demo", devenvtest.Fast.Name, "team-a/dr/verify"); err == nil ||
		!strings.Contains(err.Error(), "no restored shard's: it was not granted by entity-0") {
		t.Fatalf("verify with a probe on coord's class: %v, want it refused", err)
	}
	rep, err := verifyRestore(ctx, root, "region", "alice", "demo", entity.Name, key)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.First || rep.RTOSecs < 60 || len(rep.Clusters) != 1 || rep.Clusters[0].Cluster != "entity-0" || rep.Grant.Epoch != st.GetEpoch() {
		t.Fatalf("verify of entity-0: %+v", rep)
	}
}
