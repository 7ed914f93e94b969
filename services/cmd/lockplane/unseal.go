package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// restoredCluster is one cluster of a DR stack's "restored" output.
type restoredCluster struct {
	name, manifest, sourceID, clusterID string
	revision, epoch, highest            int64
	// restoredAt is when a shard was restored in place (zero otherwise).
	restoredAt time.Time
}

func restoredClusters(restored map[string]any) ([]restoredCluster, error) {
	var out []restoredCluster
	for name, v := range restored {
		m, _ := v.(map[string]any)
		c := restoredCluster{name: name}
		var bad []string
		str := func(k string, into *string) {
			if *into, _ = m[k].(string); *into == "" {
				bad = append(bad, k)
			}
		}
		num := func(k string, into *int64) {
			f, ok := m[k].(float64)
			if !ok {
				bad = append(bad, k)
			}
			*into = int64(f)
		}
		str("manifest", &c.manifest)
		str("sourceClusterId", &c.sourceID)
		str("clusterId", &c.clusterID)
		num("revision", &c.revision)
		num("epoch", &c.epoch)
		if name == "coord" {
			// Only coord's is a floor for the anchor; a shard's may be absent.
			num("highestAllocated", &c.highest)
		}
		if at, ok := m["restoredAt"].(string); ok {
			c.restoredAt, _ = time.Parse(time.RFC3339Nano, at)
		}
		if len(bad) > 0 {
			// A missing epoch read as 0 would print an unsafe --above.
			return nil, fmt.Errorf("the stack's restored output for %s lacks %v: run lockplane refresh, then up", name, bad)
		}
		out = append(out, c)
	}
	// coord first: the shards' advances allocate from it.
	sort.Slice(out, func(i, j int) bool {
		if (out[i].name == "coord") != (out[j].name == "coord") {
			return out[i].name == "coord"
		}
		return out[i].name < out[j].name
	})
	return out, nil
}

// EpochMargin is added to the highest epoch the snapshots show for the
// printed --above: epochs the region allocated after its snapshots (an
// advance, a shard add) are not in them, and an anchor below one of them
// could repeat a token. Epochs are cheap (2^32 of them); a margin of a
// hundred outlasts any plausible run of advances between two snapshots.
const EpochMargin = 100

// unsealCommands are the advances that unseal a restored region, coord
// first, anchored above the highest epoch the snapshots show (a floor:
// epochs allocated after the snapshots are not in them, docs/dr.md), and
// that floor. Each line runs as one of people (the stack's
// operators.people, the profile's identities of the same names).
func unsealCommands(profile string, people []string, restored map[string]any) ([]string, int64, error) {
	return advances(profile, people, restored, "DR restore from ")
}

// Placeholders for the printed lines' --identity when the stack names
// fewer than two people: each operator puts their own identity there.
const (
	requesterPlaceholder = "YOU"
	approverPlaceholder  = "ANOTHER"
)

// unsealIdentities are the profile identities the printed advance and
// approve run as: the first two of people, or placeholders. An operator's
// ID token acts only on their own operator SVID, so a line never names
// the shared identity "operator".
func unsealIdentities(people []string) (request, approve string) {
	request, approve = requesterPlaceholder, approverPlaceholder
	if len(people) > 0 {
		request = people[0]
	}
	if len(people) > 1 {
		approve = people[1]
	}
	return request, approve
}

// advances are the two-person advances that unseal the restored
// clusters, coord first, each request's reason why plus the snapshot; a
// request runs as the first of people, its approval as the second.
func advances(profile string, people []string, restored map[string]any, why string) ([]string, int64, error) {
	cs, err := restoredClusters(restored)
	if err != nil {
		return nil, 0, err
	}
	var floor int64
	for _, c := range cs {
		floor = max(floor, c.epoch, c.highest)
	}
	lockctl := "bin/lockctl"
	if profile != "" {
		lockctl += " --profile " + profile
	}
	request, approve := unsealIdentities(people)
	var cmds []string
	for _, c := range cs {
		cmd := fmt.Sprintf("%s --identity %s epoch advance --expected %d", lockctl, request, c.epoch)
		if c.name == "coord" {
			cmd += fmt.Sprintf(" --above %d", floor+EpochMargin)
		} else {
			cmd += " --cluster " + c.name
		}
		cmd += fmt.Sprintf(" --reason %q", why+c.manifest)
		cmds = append(cmds, cmd, fmt.Sprintf("%s --identity %s epoch approve ID   # a second operator, as themselves, with the ID the request printed", lockctl, approve))
	}
	return cmds, floor, nil
}

// printRestored says what a DR stack's up restored and how to unseal it.
func printRestored(w io.Writer, stack, profile string, people []string, restored map[string]any) {
	cs, err := restoredClusters(restored)
	cmds, floor, _ := unsealCommands(profile, people, restored)
	if err != nil {
		fmt.Fprintf(w, "\nrestored from the vault, and SEALED; the unseal cannot be worked out: %v\n", err)
		return
	}
	fmt.Fprintf(w, "\nrestored from the vault, and SEALED: no grant until two operators advance every cluster's epoch\n")
	for _, c := range cs {
		fmt.Fprintf(w, "  %-10s %s (revision %d, epoch %d of cluster %s), now cluster %s\n", c.name, c.manifest, c.revision, c.epoch, c.sourceID, c.clusterID)
	}
	fmt.Fprintf(w, "first make sure the region restored from is gone or fenced: two regions would allocate the same epochs.\n")
	fmt.Fprintf(w, "unseal, coord first; each request is approved by a second operator (both signed in with lockctl login, the stack's lockplane:operators):\n")
	for _, c := range cmds {
		fmt.Fprintln(w, "  "+c)
	}
	fmt.Fprint(w, identityNote(people))
	fmt.Fprintf(w, "--above %d is the highest epoch the snapshots show (%d) plus %d for epochs allocated after them. If the region may have\n"+
		"allocated more since, raise it to the audit archive's highest advance or a fenced resource's highest token >> 48 (docs/dr.md).\n",
		floor+EpochMargin, floor, EpochMargin)
	fmt.Fprintf(w, "then check every cluster, take the first grant and print the RTO:\n  %s\n", verifyCommand(stack))
}

// identityNote says whose --identity the printed lines use: an operator's
// ID token acts only on their own operator SVID (docs/operators.md).
func identityNote(people []string) string {
	const why = "an ID token acts only on its person's own operator SVID, never the shared identity operator"
	if len(people) < 2 {
		return fmt.Sprintf("--identity is each operator's own (replace %s and %s): %s; list the operators' accounts in\n"+
			"lockplane:operators.people and up writes one identity per person into the profile\n", requesterPlaceholder, approverPlaceholder, why)
	}
	return fmt.Sprintf("each operator runs their line as themselves, --identity one of %s (the profile's identities, from lockplane:operators.people):\n%s\n",
		strings.Join(people, ", "), why)
}

// verifyCommand is what ends a restore: `dr verify` of the DR stack.
func verifyCommand(stack string) string { return "bin/lockplane dr verify --stack " + stack }

// inPlaceUnseal is what an up that restored shards in place prints and
// returns: for each shard this up restored (restoredAt at or after began)
// or that no restore record names (recorded: the record's clusters), the
// advance of that shard alone, and those shards. A restore whose up failed
// after it is so named by the next up. A shard whose restore is recorded
// is named once, without the advance: the entry stays as the restore's
// record, and its shard may be unsealed already.
func inPlaceUnseal(w io.Writer, stack, profile string, people []string, restored map[string]any, began time.Time, recorded map[string]string) ([]string, []restoredCluster, error) {
	cs, err := restoredClusters(restored)
	if err != nil {
		return nil, nil, err
	}
	now := map[string]any{}
	var done []restoredCluster
	for _, c := range cs {
		if c.restoredAt.Before(began) && recorded[c.name] == c.clusterID {
			fmt.Fprintf(w, "%s was restored in place from %s at %s (lockplane:restoreInPlace; another snapshot's name restores it again)\n",
				c.name, c.manifest, c.restoredAt.Format(time.RFC3339))
			continue
		}
		now[c.name] = restored[c.name]
		done = append(done, c)
	}
	if len(now) == 0 {
		return nil, nil, nil
	}
	cmds, _, err := advances(profile, people, now, "restored in place from ")
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(w, "\nrestored in place from the vault, and SEALED: no grant on these shards until two operators advance each one's epoch;\n"+
		"coord and the other shards serve on. Each member's old data dir is kept beside the new one.\n")
	for _, name := range sortedKeys(now) {
		m := now[name].(map[string]any)
		fmt.Fprintf(w, "  %-10s %v (revision %v, epoch %v of cluster %v), now cluster %v\n", name, m["manifest"], m["revision"], m["epoch"],
			m["sourceClusterId"], m["clusterId"])
		if rep, ok := m["replaced"].(map[string]any); ok {
			for _, member := range sortedKeys(rep) {
				fmt.Fprintf(w, "             %s's old data dir: %v\n", member, rep[member])
			}
		}
	}
	fmt.Fprintf(w, "unseal each shard; each request is approved by a second operator (lockctl login, the stack's lockplane:operators).\n"+
		"The new epoch is allocated from coord, above every epoch the region has served:\n")
	for _, c := range cmds {
		fmt.Fprintln(w, "  "+c)
	}
	fmt.Fprint(w, identityNote(people))
	fmt.Fprintf(w, "then check each shard, take its first grant and print the RTO (an entity-tier class, a key the map homes on the shard):\n  %s --class CLASS --key KEY\n",
		verifyCommand(stack))
	return cmds, done, nil
}
