package main

import (
	"strings"
	"testing"
	"time"
)

// refusedEntry is a StoreSnapshot's refused entry, as the provider
// writes it.
func refusedEntry(name, reason string) map[string]any {
	return map[string]any{"name": name, "reason": reason, "detail": "snapstore: " + reason + " " + name}
}

// An in-place restore from "latest" that skipped a forged snapshot says
// so, as a DR stack's up does.
func TestAnInPlaceUpWarnsOfTheSnapshotsLatestRefused(t *testing.T) {
	at := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	restored := map[string]any{"entity-0": map[string]any{"manifest": "entity-0/m", "sourceClusterId": "old", "clusterId": "new",
		"revision": float64(9), "epoch": float64(2), "restoredAt": at.Format(time.RFC3339Nano),
		"refused": []any{refusedEntry("entity-0/20991231T000000.000Z-r9-aaaaaaaaaaaa", "untrusted")}}}
	var w strings.Builder
	if _, _, err := inPlaceUnseal(&w, "region", "p.json", []string{"alice", "bob"}, restored, at.Add(-time.Minute), nil); err != nil {
		t.Fatal(err)
	}
	if out := w.String(); !strings.Contains(out, "WARNING: the snapshot store holds 1 snapshot(s) the restore REFUSED") ||
		!strings.Contains(out, "entity-0: snapstore: untrusted entity-0/20991231T000000.000Z-r9-aaaaaaaaaaaa") {
		t.Fatalf("in-place up printed:\n%s\nwant the forged snapshot named in a WARNING", out)
	}
}

// Only a snapshot refused as untrusted (not signed by its cluster's key)
// is called a forgery; one half expired, written again or unreadable is a
// quieter note with its reason. An entry of no known reason stays loud.
func TestOnlyUntrustedRefusalsAreWarnedOfAsForgeries(t *testing.T) {
	coord := cluster("coord/y", 2, 7)
	coord["refused"] = []any{refusedEntry("coord/f", "untrusted"), refusedEntry("coord/h", "incomplete"),
		refusedEntry("coord/o", "overwritten"), refusedEntry("coord/u", "unreadable")}
	restored := map[string]any{"coord": coord, "entity-0": cluster("entity-0/z", 5, 0)}
	var w strings.Builder
	printRestored(&w, "local-dr", "p.json", []string{"alice", "bob"}, restored, 0)
	out := w.String()
	warning, note, _ := strings.Cut(out, "\nnote:")
	if !strings.Contains(warning, "WARNING: the snapshot store holds 1 snapshot(s) the restore REFUSED") || !strings.Contains(warning, "coord/f") {
		t.Fatalf("printed:\n%s\nwant one forgery warned of, coord/f", out)
	}
	for _, worn := range []string{"coord/h", "coord/o", "coord/u"} {
		if strings.Contains(warning, worn) || !strings.Contains(note, worn) {
			t.Errorf("printed:\n%s\nwant %s in the note, not the warning", out, worn)
		}
	}
	if !strings.Contains(note, "coord: incomplete: snapstore: incomplete coord/h") {
		t.Errorf("printed:\n%s\nwant the note to give each one's reason", out)
	}
	cs, _ := restoredClusters(restored)
	if rs := refusals(cs); len(rs) != 4 || rs[0].Name != "coord/f" || rs[0].Reason != "untrusted" || !rs[0].forged() || rs[1].forged() {
		t.Errorf("refusals %+v", rs)
	}
	if (refusal{Detail: "an older state's entry"}).forged() != true {
		t.Errorf("an entry of no reason is played down")
	}
}

// A signed manifest can still lie (a cluster's member hosts hold its
// key): an epoch so high that no unseal could be anchored above it is
// refused by cluster and snapshot, saying what to do; with a typed floor
// it is left out of the floor, and named.
func TestAFloorBeyondATokensEpochsIsRefusedByName(t *testing.T) {
	for _, c := range []struct {
		name     string
		restored map[string]any
		claim    string
	}{
		{"a shard's epoch near 2^32", map[string]any{"coord": cluster("coord/y", 2, 7), "entity-0": cluster("entity-0/z", 4294967290, 0)},
			"entity-0's snapshot entity-0/z (key k-entity-0/z) claims epoch record 4294967290"},
		{"coord's highest past the token's", map[string]any{"coord": cluster("coord/y", 2, 32700), "entity-0": cluster("entity-0/z", 5, 0)},
			"coord's snapshot coord/y (key k-coord/y) claims highest allocated epoch 32700"},
	} {
		_, _, err := unsealCommands("", nil, c.restored, 0)
		if err == nil || !strings.Contains(err.Error(), c.claim) || !strings.Contains(err.Error(), "restore.objects") || !strings.Contains(err.Error(), "restore.epochFloor") {
			t.Errorf("%s: err %v, want it refused naming %q, restore.objects and restore.epochFloor", c.name, err, c.claim)
		}
		cmds, floor, err := unsealCommands("", []string{"alice", "bob"}, c.restored, 500)
		if err != nil || floor != 500 || !strings.Contains(cmds[0], "--above 600 ") {
			t.Errorf("%s, typed 500: floor %d, %q (%v); want --above 600", c.name, floor, cmds, err)
		}
		var w strings.Builder
		printRestored(&w, "local-dr", "", []string{"alice", "bob"}, c.restored, 500)
		if !strings.Contains(w.String(), "WARNING: left out of the floor, beyond any epoch a token carries: "+c.claim) {
			t.Errorf("%s, typed 500: printed:\n%s\nwant the claim named as left out", c.name, w.String())
		}
	}
	// The highest floor that still leaves the advance an epoch.
	ok := map[string]any{"coord": cluster("coord/y", 2, maxFloor), "entity-0": cluster("entity-0/z", 5, 0)}
	if _, floor, err := unsealCommands("", nil, ok, 0); err != nil || floor != maxFloor {
		t.Errorf("floor %d: %d, %v", int64(maxFloor), floor, err)
	}
}

// Without restore.epochFloor the unseal text says, loudly, that the floor
// is the snapshots' alone and where the audit archive's floor is.
func TestWithoutATypedFloorTheUnsealSaysItIsTheSnapshotsAlone(t *testing.T) {
	restored := map[string]any{"coord": cluster("coord/y", 2, 7), "entity-0": cluster("entity-0/z", 5, 0)}
	restored["entity-0"].(map[string]any)["sourceClusterId"] = "e0"
	var w strings.Builder
	printRestored(&w, "local-dr", "", []string{"alice", "bob"}, restored, 0)
	out := w.String()
	for _, want := range []string{"WARNING: restore.epochFloor is not set, so --above 107 comes from the snapshots alone",
		"a host of coord could have\nsigned a snapshot", "records/epoch_advance/aa/   (coord)", "records/epoch_advance/e0/   (entity-0)",
		`docs/audit.md, "Finding the highest epoch"`, "set restore.epochFloor to it"} {
		if !strings.Contains(out, want) {
			t.Errorf("printed:\n%s\nwant %q", out, want)
		}
	}
	w.Reset()
	printRestored(&w, "local-dr", "", []string{"alice", "bob"}, restored, 500)
	if strings.Contains(w.String(), "restore.epochFloor is not set") {
		t.Errorf("with a typed floor, printed:\n%s", w.String())
	}
}
