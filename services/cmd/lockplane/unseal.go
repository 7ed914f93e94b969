package main

import (
	"fmt"
	"io"
	"sort"
)

// restoredCluster is one cluster of a DR stack's "restored" output.
type restoredCluster struct {
	name, manifest, sourceID, clusterID string
	revision, epoch, highest            int64
}

func restoredClusters(restored map[string]any) []restoredCluster {
	num := func(v any) int64 { f, _ := v.(float64); return int64(f) }
	str := func(v any) string { s, _ := v.(string); return s }
	var out []restoredCluster
	for name, v := range restored {
		m, _ := v.(map[string]any)
		out = append(out, restoredCluster{name: name, manifest: str(m["manifest"]), sourceID: str(m["sourceClusterId"]),
			clusterID: str(m["clusterId"]), revision: num(m["revision"]), epoch: num(m["epoch"]), highest: num(m["highestAllocated"])})
	}
	// coord first: the shards' advances allocate from it.
	sort.Slice(out, func(i, j int) bool {
		if (out[i].name == "coord") != (out[j].name == "coord") {
			return out[i].name == "coord"
		}
		return out[i].name < out[j].name
	})
	return out
}

// unsealCommands are the advances that unseal a restored region, coord
// first, anchored above the highest epoch the snapshots show (a floor:
// epochs allocated after the snapshots are not in them, docs/dr.md), and
// that floor.
func unsealCommands(profile string, restored map[string]any) ([]string, int64) {
	cs := restoredClusters(restored)
	var floor int64
	for _, c := range cs {
		floor = max(floor, c.epoch, c.highest)
	}
	lockctl := "bin/lockctl"
	if profile != "" {
		lockctl += " --profile " + profile
	}
	var cmds []string
	for _, c := range cs {
		cmd := fmt.Sprintf("%s epoch advance --expected %d", lockctl, c.epoch)
		if c.name == "coord" {
			cmd += fmt.Sprintf(" --above %d", floor)
		} else {
			cmd += " --cluster " + c.name
		}
		cmd += fmt.Sprintf(" --reason %q", "DR restore from "+c.manifest)
		cmds = append(cmds, cmd, lockctl+" epoch approve ID   # a second operator, with the ID the request printed")
	}
	return cmds, floor
}

// printRestored says what a DR stack's up restored and how to unseal it.
func printRestored(w io.Writer, profile string, restored map[string]any) {
	fmt.Fprintf(w, "\nrestored from the vault, and SEALED: no grant until two operators advance every cluster's epoch\n")
	for _, c := range restoredClusters(restored) {
		fmt.Fprintf(w, "  %-10s %s (revision %d, epoch %d of cluster %s), now cluster %s\n", c.name, c.manifest, c.revision, c.epoch, c.sourceID, c.clusterID)
	}
	cmds, floor := unsealCommands(profile, restored)
	fmt.Fprintf(w, "unseal, coord first; each request is approved by a second operator (both signed in with lockctl login, the stack's lockplane:operators):\n")
	for _, c := range cmds {
		fmt.Fprintln(w, "  "+c)
	}
	fmt.Fprintf(w, "--above %d is the highest epoch the snapshots show. Epochs the region allocated after them are not in them: raise it to the highest epoch\n"+
		"of the audit archive's advance records or of a fenced resource's highest token >> 48, if higher (docs/dr.md).\n", floor)
}
