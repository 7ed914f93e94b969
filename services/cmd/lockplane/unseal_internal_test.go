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
	cmds, floor, err := unsealCommands("p.json", []string{"alice", "bob"}, restored, 0)
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
		cmds, _, err := unsealCommands("p.json", c.people, restored, 0)
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
		printRestored(&w, "dr", "p.json", c.people, restored, 0)
		if !strings.Contains(w.String(), c.note) || strings.Contains(w.String(), "--identity operator") {
			t.Fatalf("people %v: printed\n%s\nwant the note %q", c.people, w.String(), c.note)
		}
	}
}

func cluster(manifest string, epoch, highest float64) map[string]any {
	return map[string]any{"manifest": manifest, "epoch": epoch, "highestAllocated": highest, "revision": 7.0,
		"sourceClusterId": "aa", "clusterId": "bb", "keyId": "k-" + manifest}
}

// A restored output without an epoch is refused, not read as epoch 0
// (which would print an --above below what the region served).
func TestUnsealRefusesARestoredOutputWithoutAnEpoch(t *testing.T) {
	c := cluster("coord/y.json", 2, 7)
	delete(c, "epoch")
	if _, _, err := unsealCommands("", nil, map[string]any{"coord": c}, 0); err == nil || !strings.Contains(err.Error(), "lacks [epoch]") {
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

// The unseal floor comes only from snapshots verified against the snapshot store
// stack's signing keys, and the printed text names which snapshot and
// key it came from; snapshots the restore refused are named as a
// warning. A restored output without a keyId (a snapshot not verified)
// gives no floor at all.
func TestTheUnsealFloorComesFromVerifiedSnapshotsAndSaysWhich(t *testing.T) {
	coord := cluster("coord/y", 2, 7)
	coord["refused"] = []any{"snapstore: untrusted snapshot coord/20991231T000000.000Z-r9-aaaaaaaaaaaa: it is not signed: refusing it"}
	restored := map[string]any{"coord": coord, "entity-0": cluster("entity-0/z", 5, 0)}
	var w strings.Builder
	printRestored(&w, "local-dr", "p.json", []string{"alice", "bob"}, restored, 0)
	out := w.String()
	for _, want := range []string{
		"WARNING: the snapshot store holds 1 snapshot(s) the restore REFUSED",
		"coord: snapstore: untrusted snapshot coord/20991231T000000.000Z-r9-aaaaaaaaaaaa: it is not signed",
		"--above 107 comes from the snapshots alone: it is the highest epoch the restored snapshots show (7: the highest allocated epoch of coord's coord/y, whose manifest key k-coord/y",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("printed:\n%s\nwant %q", out, want)
		}
	}
	cs, _ := restoredClusters(restored)
	if got := refusedSnapshots(cs); len(got) != 1 || !strings.HasPrefix(got[0], "coord: snapstore: untrusted snapshot") {
		t.Errorf("refused %q", got)
	}
	delete(restored["entity-0"].(map[string]any), "keyId")
	if _, _, err := unsealCommands("", nil, restored, 0); err == nil || !strings.Contains(err.Error(), "not verified against the store stack's snapshot signing keys") {
		t.Fatalf("an unverified snapshot's floor: err %v", err)
	}
}

// A floor the operators type (restore.epochFloor, e.g. the audit
// archive's newest epoch advance) raises --above when it is higher than
// the snapshots', and the text names which one won.
func TestAnOperatorsEpochFloorRaisesTheUnsealAndIsNamed(t *testing.T) {
	restored := map[string]any{"coord": cluster("coord/y", 2, 7), "entity-0": cluster("entity-0/z", 5, 0)}
	cmds, floor, err := unsealCommands("", []string{"alice", "bob"}, restored, 500)
	if err != nil || floor != 500 || !strings.Contains(cmds[0], "--above 600 ") {
		t.Fatalf("typed 500: floor %d, %q (%v); want --above 600", floor, cmds, err)
	}
	var w strings.Builder
	printRestored(&w, "local-dr", "", []string{"alice", "bob"}, restored, 500)
	if !strings.Contains(w.String(), "--above 600 is restore.epochFloor (500), the operators' floor, plus 100: it is above the highest epoch the restored snapshots show (7") {
		t.Errorf("printed:\n%s", w.String())
	}
	w.Reset()
	printRestored(&w, "local-dr", "", []string{"alice", "bob"}, restored, 3)
	if !strings.Contains(w.String(), "--above 107 is the highest epoch the restored snapshots show (7") || !strings.Contains(w.String(), "restore.epochFloor (3) is not above it") {
		t.Errorf("printed:\n%s", w.String())
	}
}
