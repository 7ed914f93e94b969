package main

import (
	"strings"
	"testing"
	"time"
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
	cmds, floor, err := unsealCommands("p.json", []string{"alice", "bob"}, restored)
	if err != nil {
		t.Fatal(err)
	}
	if floor != 9 {
		t.Fatalf("floor %d, want 9 (entity-1's epoch)", floor)
	}
	want := []string{
		`bin/lockctl --profile p.json --identity alice epoch advance --expected 2 --above 109 --reason "DR restore from coord/y.json"`,
		`bin/lockctl --profile p.json --identity alice epoch advance --expected 5 --cluster entity-0 --reason "DR restore from entity-0/z.json"`,
		`bin/lockctl --profile p.json --identity alice epoch advance --expected 9 --cluster entity-1 --reason "DR restore from entity-1/x.json"`,
	}
	var got []string
	for _, c := range cmds {
		if strings.Contains(c, "epoch advance") {
			got = append(got, c)
		} else if !strings.HasPrefix(c, "bin/lockctl --profile p.json --identity bob epoch approve ID") {
			t.Errorf("unexpected command %q", c)
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("advances:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Every printed line runs as a person, never the shared identity
// operator, whose SVID (/operator/deployer) names no one and so carries
// no one's ID token: the stack's people when it names two, placeholders
// (and a note saying whose) otherwise.
func TestUnsealLinesRunAsPeopleNotTheSharedOperator(t *testing.T) {
	restored := map[string]any{"coord": cluster("coord/y.json", 2, 7), "entity-0": cluster("entity-0/z.json", 5, 0)}
	for _, c := range []struct {
		people                 []string
		request, approve, note string
	}{
		{[]string{"carol", "dave"}, "carol", "dave", "--identity one of carol, dave"},
		{nil, "YOU", "ANOTHER", "replace YOU and ANOTHER"},
		{[]string{"carol"}, "carol", "ANOTHER", "replace YOU and ANOTHER"},
	} {
		cmds, _, err := unsealCommands("p.json", c.people, restored)
		if err != nil || len(cmds) != 4 {
			t.Fatalf("people %v: %q (%v)", c.people, cmds, err)
		}
		for i, cmd := range cmds {
			who := c.request
			if i%2 == 1 {
				who = c.approve
			}
			if !strings.HasPrefix(cmd, "bin/lockctl --profile p.json --identity "+who+" epoch ") || strings.Contains(cmd, "--identity operator") {
				t.Fatalf("people %v: line %d %q, want it run as %s", c.people, i, cmd, who)
			}
		}
		var w strings.Builder
		printRestored(&w, "dr", "p.json", c.people, restored)
		if !strings.Contains(w.String(), c.note) || strings.Contains(w.String(), "--identity operator") {
			t.Fatalf("people %v: printed\n%s\nwant the note %q", c.people, w.String(), c.note)
		}
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
	if _, _, err := unsealCommands("", nil, map[string]any{"coord": c}); err == nil || !strings.Contains(err.Error(), "lacks [epoch]") {
		t.Fatalf("err %v", err)
	}
}

// A shard restored in place is unsealed by the up that restored it, or,
// when that up failed after the restore, by the next: the advance is
// printed (and the restore recorded, timed from the restore) until a
// record names the restored cluster. Then later ups only name it.
func TestAnInPlaceRestoreIsUnsealedUntilItIsRecorded(t *testing.T) {
	at := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	restored := map[string]any{"entity-0": map[string]any{"manifest": "entity-0/m", "sourceClusterId": "old", "clusterId": "new",
		"revision": float64(9), "epoch": float64(2), "restoredAt": at.Format(time.RFC3339Nano)}}
	unseal := func(began time.Time, recorded map[string]string) ([]string, []restoredCluster, string) {
		t.Helper()
		var w strings.Builder
		cmds, done, err := inPlaceUnseal(&w, "region", "p.json", []string{"alice", "bob"}, restored, began, recorded)
		if err != nil {
			t.Fatal(err)
		}
		return cmds, done, w.String()
	}
	// The up that restored it.
	if cmds, done, _ := unseal(at.Add(-time.Minute), nil); len(cmds) != 2 || len(done) != 1 ||
		cmds[0] != `bin/lockctl --profile p.json --identity alice epoch advance --expected 2 --cluster entity-0 --reason "restored in place from entity-0/m"` ||
		!strings.HasPrefix(cmds[1], "bin/lockctl --profile p.json --identity bob epoch approve ID") {
		t.Fatalf("the restoring up: %q", cmds)
	}
	// That up failed after the restore: the next prints the advance, and
	// records the restore from its own time.
	cmds, done, _ := unseal(at.Add(time.Hour), nil)
	if len(cmds) != 2 || len(done) != 1 {
		t.Fatalf("the up after a failed restoring up: %q, want the advance", cmds)
	}
	root := t.TempDir()
	if err := recordInPlace(root, "region", at.Add(time.Hour), done); err != nil {
		t.Fatal(err)
	}
	rec, err := readRestoreRecord(restoreRecordPath(root, "region"))
	if err != nil || !rec.StartedAt.Equal(at) || !rec.InPlace || rec.Clusters["entity-0"] != "new" {
		t.Fatalf("record %+v (%v): want the restore timed from %s", rec, err, at)
	}
	// Recorded: named only. An older restore's record is not this one's.
	if cmds, _, out := unseal(at.Add(2*time.Hour), rec.Clusters); len(cmds) != 0 || !strings.Contains(out, "entity-0 was restored in place from entity-0/m") {
		t.Fatalf("an up after the recorded restore: %q, %q", cmds, out)
	}
	if cmds, _, _ := unseal(at.Add(2*time.Hour), map[string]string{"entity-0": "older"}); len(cmds) != 2 {
		t.Fatalf("an up whose record is of an older restore: %q, want the advance", cmds)
	}
}
