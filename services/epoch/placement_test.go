package epoch_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/lockplane/lockplane/services/epoch"
)

// A record written before placements existed decodes, and encodes, as
// before: the field is absent, not empty.
func TestARecordWithoutPlacementEncodesAsBefore(t *testing.T) {
	old := `{"epoch":3,"cluster_id":"abc","since":"2026-01-02T03:04:05Z","reason":"bootstrapped","map_version":2}`
	st, err := epoch.Decode([]byte(old), 1)
	if err != nil {
		t.Fatal(err)
	}
	if st.Placement != "" {
		t.Fatalf("placement %q from a record without one", st.Placement)
	}
	again, _ := json.Marshal(st.Record)
	if string(again) != old {
		t.Fatalf("re-encoded\n%s\nwant\n%s", again, old)
	}
}

// The placement is set by an advance that names one, kept by an advance
// that names none and by a shard map stamp, and stamped once into a record
// without one; Place never replaces a placement.
func TestThePlacementIsKeptByEveryRewriteButAnAdvanceNamingOne(t *testing.T) {
	cli := cluster(t)
	ctx := ctxT(t)
	if _, err := epoch.Anchor(ctx, cli, 0); err != nil {
		t.Fatal(err)
	}
	adv, err := epoch.Bootstrap(ctx, cli, cli, "c", 0)
	if err != nil {
		t.Fatal(err)
	}
	if adv.Placement != "" {
		t.Fatalf("bootstrap placed %q", adv.Placement)
	}
	placed, err := epoch.Place(ctx, cli, adv.State, "p1")
	if err != nil || placed.Placement != "p1" || placed.Epoch != adv.Epoch {
		t.Fatalf("place: %+v, %v", placed.Record, err)
	}
	// The compare is the record's bytes: a stale state cannot stamp.
	if _, err := epoch.Place(ctx, cli, adv.State, "p2"); !errors.Is(err, epoch.ErrChanged) {
		t.Fatalf("place on a stale record: %v, want ErrChanged", err)
	}
	if _, err := epoch.Place(ctx, cli, placed, "p2"); !errors.Is(err, epoch.ErrChanged) {
		t.Fatalf("place over a placement: %v, want ErrChanged", err)
	}
	stamped, err := epoch.Stamp(ctx, cli, 7)
	if err != nil || stamped.Placement != "p1" {
		t.Fatalf("stamp: %+v, %v; want placement p1 kept", stamped.Record, err)
	}
	kept, err := epoch.Advance(ctx, cli, cli, epoch.Change{Cluster: "c", Expected: adv.Epoch, Reason: "kept"})
	if err != nil || kept.Placement != "p1" {
		t.Fatalf("advance naming no placement: %+v, %v; want p1 kept", kept.Record, err)
	}
	moved, err := epoch.Advance(ctx, cli, cli, epoch.Change{Cluster: "c", Expected: kept.Epoch, Reason: "rehome", Placement: "p2"})
	if err != nil || moved.Placement != "p2" {
		t.Fatalf("advance naming p2: %+v, %v", moved.Record, err)
	}
	st, _, err := epoch.Read(ctx, cli)
	if err != nil || st.Placement != "p2" {
		t.Fatalf("stored %+v, %v", st.Record, err)
	}
}
