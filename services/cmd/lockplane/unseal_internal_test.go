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
		"entity-1": map[string]any{"manifest": "entity-1/x.json", "epoch": 9.0},
		"coord":    map[string]any{"manifest": "coord/y.json", "epoch": 2.0, "highestAllocated": 7.0},
		"entity-0": map[string]any{"manifest": "entity-0/z.json", "epoch": 5.0},
	}
	cmds, floor := unsealCommands("p.json", restored)
	if floor != 9 {
		t.Fatalf("floor %d, want 9 (entity-1's epoch)", floor)
	}
	want := []string{
		`bin/lockctl --profile p.json epoch advance --expected 2 --above 9 --reason "DR restore from coord/y.json"`,
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
