package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/lockplane/lockplane/services/client/token"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
)

// restoredCluster is one cluster of a DR stack's "restored" output.
type restoredCluster struct {
	name, manifest, sourceID, clusterID string
	revision, epoch, highest            int64
	// restoredAt is when a shard was restored in place (zero otherwise).
	restoredAt time.Time
	// keyID is the signing key (the store stack's, for this cluster) the
	// snapshot's manifest was verified by: empty for a restore made
	// before snapshots were signed, whose epochs are no floor.
	keyID string
	// refused are the snapshots "latest" left out, each with why.
	refused []refusal
}

// refusal is one snapshot "latest" left out: the StoreSnapshot's refused
// entry {name, reason, detail}. An entry of an older state is its detail
// alone, with no reason.
type refusal struct {
	Cluster string `json:"cluster"`
	Name    string `json:"name,omitempty"`
	// Reason is "untrusted" (not signed by its cluster's key: a forgery),
	// "incomplete", "overwritten" or "unreadable"; "" when not given.
	Reason string `json:"reason,omitempty"`
	Detail string `json:"detail"`
}

// forged reports whether r may be a forgery: untrusted, or of a reason
// this tool does not know (an older state's entry, a newer provider's
// reason), which is never played down.
func (r refusal) forged() bool {
	switch r.Reason {
	case "incomplete", "overwritten", "unreadable":
		return false
	}
	return true
}

// refusalOf reads one entry of a restored cluster's refused output.
func refusalOf(cluster string, v any) refusal {
	r := refusal{Cluster: cluster}
	m, ok := v.(map[string]any)
	if !ok {
		r.Detail = fmt.Sprint(v)
		return r
	}
	r.Name, _ = m["name"].(string)
	r.Reason, _ = m["reason"].(string)
	r.Detail, _ = m["detail"].(string)
	return r
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
		c.keyID, _ = m["keyId"].(string)
		if rs, ok := m["refused"].([]any); ok {
			for _, r := range rs {
				c.refused = append(c.refused, refusalOf(name, r))
			}
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
// could repeat a token. A token carries epochs up to token.MaxEpoch
// (32767); a margin of a hundred outlasts any plausible run of advances
// between two snapshots and spends little of them.
const EpochMargin = 100

// maxFloor is the highest floor an unseal can be anchored on: coord's
// advance allocates above floor+EpochMargin, and the epoch allocator
// refuses an anchor at or above the last epoch a token carries.
const maxFloor = token.MaxEpoch - 1 - EpochMargin

// unsealCommands are the advances that unseal a restored region, coord
// first, anchored above the floor (plus EpochMargin): the highest epoch
// the snapshots show (epochs allocated after the snapshots are not in
// them, docs/dr.md) or typed, whichever is higher, and that floor. Each
// line runs as one of people (the stack's operators.people, the
// profile's identities of the same names). The snapshots' floor is taken
// only from snapshots verified against the store stack's signing keys
// (floorOf). typed is the DR stack's restore.epochFloor (0: none).
func unsealCommands(profile string, people []string, restored map[string]any, typed int64) ([]string, int64, error) {
	cs, err := restoredClusters(restored)
	if err != nil {
		return nil, 0, err
	}
	src, err := floorOf(cs, typed)
	if err != nil {
		return nil, 0, err
	}
	floor := max(typed, src.floor)
	return advances(profile, people, cs, "DR restore from ", floor), floor, nil
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

// floorSource is where the unseal floor came from: the restored cluster
// whose verified snapshot holds the highest epoch, and which of its
// numbers it is; overruled are the claims left out for being beyond any
// epoch a token carries, which only a typed floor may overrule.
type floorSource struct {
	floor     int64
	c         restoredCluster
	what      string
	overruled []string
}

// floorOf is the highest epoch the restored snapshots show, and whose. It
// refuses a snapshot not verified against the store stack's signing
// keys (no keyId): only a snapshot its cluster's key signed is evidence
// of the epochs the region served; anyone who could write to the snapshot store
// could have put any other there. A signed claim can still be false (a
// cluster's member hosts hold its key): one so high that no unseal could
// be anchored above it (maxFloor) is refused by cluster and snapshot, or,
// when the operators typed a floor, left out and named. Every cluster's
// snapshot counts: epochs are allocated from coord, so a shard's epoch
// was at most coord's highest when it was taken, but the snapshots were
// taken at different times.
func floorOf(cs []restoredCluster, typed int64) (floorSource, error) {
	var f floorSource
	if typed > maxFloor {
		return f, fmt.Errorf("restore.epochFloor %d: above %d, no unseal can be anchored on it (--above %d+%d, and a token carries epochs up to %d)",
			typed, maxFloor, typed, EpochMargin, token.MaxEpoch)
	}
	for _, c := range cs {
		if c.keyID == "" {
			return f, fmt.Errorf("%s was restored from %s, which was not verified against the store stack's snapshot signing keys (no keyId): "+
				"its epochs are no floor for the unseal; restore it again (docs/dr.md, \"A refused snapshot\")", c.name, c.manifest)
		}
		for _, n := range []struct {
			v    int64
			what string
		}{{c.epoch, "epoch record"}, {c.highest, "highest allocated epoch"}} {
			if n.v > maxFloor {
				claim := fmt.Sprintf("%s's snapshot %s (key %s) claims %s %d", c.name, c.manifest, c.keyID, n.what, n.v)
				if typed > 0 {
					f.overruled = append(f.overruled, claim)
					continue
				}
				return f, fmt.Errorf("%s: no unseal can be anchored above it (--above %d+%d, and a token carries epochs up to %d). A region cannot have "+
					"served so many epochs: a host holding %s's signing key may have signed a false manifest. Pin another snapshot of %s in "+
					"restore.objects (lockplane snapshot list), or set restore.epochFloor from the audit archive (docs/audit.md, \"Finding the "+
					"highest epoch\"), which then stands in for this claim", claim, n.v, EpochMargin, token.MaxEpoch, c.name, c.name)
			}
			if n.v > f.floor || f.what == "" {
				f.floor, f.c, f.what = n.v, c, n.what
			}
		}
	}
	return f, nil
}

// advances are the two-person advances that unseal the restored
// clusters, coord first (its --above is above), each request's reason
// why plus the snapshot; a request runs as the first of people, its
// approval as the second.
func advances(profile string, people []string, cs []restoredCluster, why string, above int64) []string {
	lockctl := "bin/lockctl"
	if profile != "" {
		lockctl += " --profile " + profile
	}
	request, approve := unsealIdentities(people)
	var cmds []string
	for _, c := range cs {
		cmd := fmt.Sprintf("%s --identity %s epoch advance --expected %d", lockctl, request, c.epoch)
		if c.name == "coord" {
			cmd += fmt.Sprintf(" --above %d", above+EpochMargin)
		} else {
			cmd += " --cluster " + c.name
		}
		cmd += fmt.Sprintf(" --reason %q", why+c.manifest)
		cmds = append(cmds, cmd, fmt.Sprintf("%s --identity %s epoch approve ID   # a second operator, as themselves, with the ID the request printed", lockctl, approve))
	}
	return cmds
}

// printRestored says what a DR stack's up restored and how to unseal it.
func printRestored(w io.Writer, stack, profile string, people []string, restored map[string]any, typed int64) {
	cs, err := restoredClusters(restored)
	if err == nil {
		printRefused(w, cs)
	}
	var src floorSource
	if err == nil {
		src, err = floorOf(cs, typed)
	}
	if err != nil {
		fmt.Fprintf(w, "\nrestored from the snapshot store, and SEALED; the unseal cannot be worked out: %v\n", err)
		return
	}
	floor := max(typed, src.floor)
	cmds := advances(profile, people, cs, "DR restore from ", floor)
	fmt.Fprintf(w, "\nrestored from the snapshot store, and SEALED: no grant until two operators advance every cluster's epoch\n")
	for _, c := range cs {
		fmt.Fprintf(w, "  %-10s %s (revision %d, epoch %d of cluster %s, signed by key %s), now cluster %s\n", c.name, c.manifest, c.revision, c.epoch, c.sourceID, c.keyID, c.clusterID)
	}
	fmt.Fprintf(w, "first make sure the region restored from is gone or fenced: two regions would allocate the same epochs.\n")
	fmt.Fprintf(w, "unseal, coord first; each request is approved by a second operator (both signed in with lockctl login, the stack's lockplane:operators):\n")
	for _, c := range cmds {
		fmt.Fprintln(w, "  "+c)
	}
	fmt.Fprint(w, identityNote(people))
	snaps := fmt.Sprintf("the highest epoch the restored snapshots show (%d: the %s of %s's %s, whose manifest key %s of the store stack's\n"+
		"snapshot signing keys verified)", src.floor, src.what, src.c.name, src.c.manifest, src.c.keyID)
	for _, o := range src.overruled {
		fmt.Fprintf(w, "WARNING: left out of the floor, beyond any epoch a token carries: %s. restore.epochFloor stands in for it; find out who signed it before you unseal.\n", o)
	}
	switch {
	case typed > src.floor:
		fmt.Fprintf(w, "--above %d is restore.epochFloor (%d), the operators' floor, plus %d: it is above %s.\n",
			floor+EpochMargin, typed, EpochMargin, snaps)
	case typed > 0:
		fmt.Fprintf(w, "--above %d is %s plus %d; restore.epochFloor (%d) is not above it.\n", floor+EpochMargin, snaps, EpochMargin, typed)
	default:
		fmt.Fprint(w, noTypedFloor(cs, floor, snaps))
	}
	fmt.Fprintf(w, "then check every cluster, take the first grant and print the RTO:\n  %s\n", verifyCommand(stack))
}

// noTypedFloor is the unseal's warning when restore.epochFloor is not
// set: the floor is then the snapshots' alone, and every cluster's member
// hosts hold its signing key, so a host of coord could have signed a
// snapshot that shows fewer epochs than the region served. It says where
// the floor no region host can write is: each restored cluster's newest
// records/epoch_advance/<cluster_id>/ object in the audit archive.
func noTypedFloor(cs []restoredCluster, floor int64, snaps string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "WARNING: restore.epochFloor is not set, so --above %d comes from the snapshots alone: it is %s,\n"+
		"plus %d for epochs allocated after them. Every member host of a cluster holds that cluster's signing key, so a host of coord could have\n"+
		"signed a snapshot showing fewer epochs than the region served, and an unseal below them repeats its tokens. Before you unseal,\n"+
		"read the newest object under each of these prefixes in the region's audit archive (docs/audit.md, \"Finding the highest epoch\"):\n",
		floor+EpochMargin, snaps, EpochMargin)
	for _, c := range cs {
		fmt.Fprintf(&b, "  records/epoch_advance/%s/   (%s)\n", c.sourceID, c.name)
	}
	fmt.Fprintf(&b, "and, if the highest epoch there is above %d, set restore.epochFloor to it in the stack's lockplane:restore and run up again\n"+
		"(a fenced resource's highest token >> 48 is a floor too, docs/dr.md).\n", floor)
	return b.String()
}

// refusedSnapshots are the snapshots the restore left out, each named
// with its cluster and why, as `up -o json` lists them (refused).
func refusedSnapshots(cs []restoredCluster) []string {
	var out []string
	for _, r := range refusals(cs) {
		out = append(out, r.Cluster+": "+r.Detail)
	}
	return out
}

// refusals are the refused snapshots of every cluster of cs.
func refusals(cs []restoredCluster) []refusal {
	var out []refusal
	for _, c := range cs {
		out = append(out, c.refused...)
	}
	return out
}

// printRefused names the snapshots the restore refused. Those not signed
// by their cluster's key (or of no known reason) were written by someone
// other than the cluster's snapshot job: a loud WARNING, since one newer
// than the restored one is what a forger would leave. Those half expired,
// written again (whose first version is what is read) or unreadable are
// the snapshot store's wear: a note.
func printRefused(w io.Writer, cs []restoredCluster) {
	var forged, worn []refusal
	for _, r := range refusals(cs) {
		if r.forged() {
			forged = append(forged, r)
		} else {
			worn = append(worn, r)
		}
	}
	if len(forged) > 0 {
		fmt.Fprintf(w, "\nWARNING: the snapshot store holds %d snapshot(s) the restore REFUSED as not signed by their cluster's key, and did not restore (docs/dr.md, \"A refused snapshot\"):\n", len(forged))
		for _, r := range forged {
			fmt.Fprintln(w, "  "+r.Cluster+": "+r.Detail)
		}
		fmt.Fprintln(w, "a snapshot not signed by its cluster's key was put there by someone other than the cluster's snapshot job: find out who before you unseal.")
	}
	if len(worn) > 0 {
		fmt.Fprintf(w, "\nnote: the snapshot store also holds %d snapshot(s) not whole or not readable (left out), or written again since they were stored (only their\n"+
			"first version is read); none is a forgery (docs/dr.md, \"A refused snapshot\"):\n", len(worn))
		for _, r := range worn {
			fmt.Fprintf(w, "  %s: %s: %s\n", r.Cluster, r.Reason, r.Detail)
		}
	}
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
	// Coord is never restored in place: no --above is printed.
	cmds := advances(profile, people, done, "restored in place from ", 0)
	printRefused(w, done)
	fmt.Fprintf(w, "\nrestored in place from the snapshot store, and SEALED: no grant on these shards until two operators advance each one's epoch;\n"+
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

// typedFloor is the DR stack's restore.epochFloor, as its program exports
// it (restoreEpochFloor); 0 when none is set.
func typedFloor(outputs auto.OutputMap) int64 {
	f, _ := outputs["restoreEpochFloor"].Value.(float64)
	return int64(f)
}
