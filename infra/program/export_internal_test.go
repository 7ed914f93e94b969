package program

import (
	"testing"

	"github.com/lockplane/lockplane/infra/nodes"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// A shard restored in place exports what its StoreSnapshot refused, as a
// DR stack's restored output does: an in-place `up` from "latest" that
// skipped a forged snapshot must be able to say so. Every key the DR
// entry gives the printing (but the coord-only floor and the time) is in
// the in-place entry too.
func TestAnInPlaceRestoreExportsTheSnapshotsLatestRefused(t *testing.T) {
	snap := &nodes.StoreSnapshot{}
	entry := inPlaceEntry(&nodes.ShardRestore{Chosen: snap})
	if got, ok := entry["refused"].(pulumi.ArrayOutput); !ok || got != snap.Refused {
		t.Fatalf("restoredInPlace refused %#v, want the chosen StoreSnapshot's refused output", entry["refused"])
	}
	for k := range restoredEntry(snap, pulumi.StringOutput{}) {
		if _, ok := entry[k]; !ok && k != "highestAllocated" && k != "takenAt" {
			t.Errorf("restoredInPlace lacks %q, which restored carries", k)
		}
	}
}
