package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
)

// restoredOutput is a DR stack's "restored" output for one coord cluster.
func restoredOutput(clusterID string, epoch float64) map[string]any {
	return map[string]any{"coord": map[string]any{"manifest": "coord/m.json", "sourceClusterId": "old", "clusterId": clusterID,
		"revision": float64(9), "epoch": epoch, "highestAllocated": epoch}}
}

// An up re-run after a restore keeps the restore's start; an up that
// restores other clusters starts the clock again.
func TestARestoreIsTimedFromTheUpThatRestored(t *testing.T) {
	root := t.TempDir()
	first := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	for _, up := range []struct {
		at      time.Time
		cluster string
		want    time.Time
	}{{first, "c1", first}, {first.Add(time.Hour), "c1", first}, {first.Add(2 * time.Hour), "c2", first.Add(2 * time.Hour)}} {
		if err := recordRestore(root, "dr", up.at, restoredOutput(up.cluster, 3)); err != nil {
			t.Fatal(err)
		}
		rec, err := readRestoreRecord(restoreRecordPath(root, "dr"))
		if err != nil {
			t.Fatal(err)
		}
		if !rec.StartedAt.Equal(up.want) || rec.Floor != 3 || rec.Clusters["coord"] != up.cluster {
			t.Fatalf("after an up at %s restoring %s: %+v, want the start %s", up.at, up.cluster, rec, up.want)
		}
	}
}

// verify passes only for the restored clusters, unsealed above the floor,
// and keeps the first grant's RTO.
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
	id, epoch := st.GetClusterId(), float64(st.GetEpoch())
	verify := func() (verifyReport, error) {
		return verifyRestore(ctx, root, "dr", "alice", "demo", devenvtest.Fast.Name, "team-a/dr/verify")
	}

	if _, err := verify(); err == nil || !strings.Contains(err.Error(), "no restore recorded") {
		t.Fatalf("verify with no restore: %v", err)
	}
	// The profile reaches a cluster the restore did not make.
	recordRestore(root, "dr", time.Now(), restoredOutput("another", 0))
	if _, err := verify(); err == nil || !strings.Contains(err.Error(), "not another, the one the restore made") {
		t.Fatalf("verify of another cluster: %v", err)
	}
	// The cluster serves an epoch the snapshots already show.
	recordRestore(root, "dr", time.Now(), restoredOutput(id, epoch))
	if _, err := verify(); err == nil || !strings.Contains(err.Error(), "not above") {
		t.Fatalf("verify at the floor: %v", err)
	}
	began := time.Now().Add(-time.Minute)
	recordRestore(root, "dr", began, restoredOutput(id, epoch-1))
	// recordRestore keeps the record of the same clusters: replace it as a
	// new restore would.
	rec, _ := readRestoreRecord(restoreRecordPath(root, "dr"))
	rec.StartedAt, rec.Floor = began, int64(epoch-1)
	writeRestoreRecord(restoreRecordPath(root, "dr"), rec)
	rep, err := verify()
	if err != nil {
		t.Fatal(err)
	}
	if !rep.First || rep.RTOSecs < 60 || len(rep.Clusters) != 1 || rep.Grant.Epoch != uint32(epoch) {
		t.Fatalf("first verify: %+v", rep)
	}
	again, err := verify()
	if err != nil {
		t.Fatal(err)
	}
	if again.First || again.RTO != rep.RTO {
		t.Fatalf("a second verify reports RTO %s (first %v), want the first verification's %s", again.RTO, again.First, rep.RTO)
	}
}
