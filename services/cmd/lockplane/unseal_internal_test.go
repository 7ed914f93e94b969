package main

import (
	"strings"
	"testing"
)

// The unseal advances coord first, anchored above the highest epoch any
// snapshot shows (a shard's epoch may exceed coord's allocation record),
// then every shard at the epoch its snapshot holds.
func TestUnsealAdvancesCoordFirstAboveEverySnapshotsEpoch(t *testing.T) {
	restored := map[string]any{
		"entity-1": cluster("entity-1/x.json", 9, 0),
		"coord":    cluster("coord/y.json", 2, 7),
		"entity-0": cluster("entity-0/z.json", 5, 0),
	}
	cmds, floor, err := unsealCommands("p.json", restored)
	if err != nil {
		t.Fatal(err)
	}
	if floor != 9 {
		t.Fatalf("floor %d, want 9 (entity-1's epoch)", floor)
	}
	want := []string{
		`bin/lockctl --profile p.json epoch advance --expected 2 --above 109 --reason "DR restore from coord/y.json"`,
		`bin/lockctl --profile p.json epoch advance --expected 5 --cluster entity-0 --reason "DR restore from entity-0/z.json"`,
		`bin/lockctl --profile p.json epoch advance --expected 9 --cluster entity-1 --reason "DR restore from entity-1/x.json"`,
	}
	var got []string
	for _, c := range cmds {
		if strings.Contains(c, "epoch advance") {
			got = append(got, c)
		} else if !strings.Contains(c, "epoch approve ID") {
			t.Errorf("unexpected command %q", c)
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("advances:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func cluster(manifest string, epoch, highest float64) map[string]any {
	return map[string]any{"manifest": manifest, "epoch": epoch, "highestAllocated": highest, "revision": 7.0,
		"sourceClusterId": "aa", "clusterId": "bb"}
}

// A restored output without an epoch is refused, not read as epoch 0
// (which would print an --above below what the region served).
func TestUnsealRefusesARestoredOutputWithoutAnEpoch(t *testing.T) {
	c := cluster("coord/y.json", 2, 7)
	delete(c, "epoch")
	if _, _, err := unsealCommands("", map[string]any{"coord": c}); err == nil || !strings.Contains(err.Error(), "lacks [epoch]") {
		t.Fatalf("err %v", err)
	}
}
