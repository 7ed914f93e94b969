package topology

import (
	"fmt"
	"strings"

	"github.com/lockplane/lockplane/services/client/token"
)

// Restore makes a stack a DR stack (docs/dr.md): every cluster of the
// region is stood up from a snapshot in the region's snapshot store instead of
// empty, and stays sealed until the operators advance its epoch.
type Restore struct {
	// StoreStack is the snapshot store's stack the snapshots are read from, as the
	// region's restorer. Empty: not a DR stack.
	StoreStack string `json:"storeStack,omitempty"`
	// OldStoreStack is vaultStack, StoreStack's old name: read as it.
	OldStoreStack string `json:"vaultStack,omitempty"`
	// From is "latest" (the default): each cluster's newest whole
	// snapshot, chosen once when the stack is first deployed.
	From string `json:"from,omitempty"`
	// Objects pins a cluster's snapshot by its manifest's object name
	// (`lockplane snapshot list`), overriding From for that cluster.
	Objects map[string]string `json:"objects,omitempty"`
	// EpochFloor is an epoch the operators found the region had reached,
	// from a source no region host can write (the newest
	// records/epoch_advance/<cluster_id>/ object in the audit archive,
	// docs/audit.md): the printed unseal's --above is at least it plus the
	// margin, whatever the snapshots show. 0: the snapshots' alone.
	EpochFloor int64 `json:"epochFloor,omitempty"`
}

// Enabled reports whether the stack restores its clusters.
func (r Restore) Enabled() bool { return r.StoreStack != "" }

// MaxEpochFloor is the highest restore.epochFloor: the unseal's --above
// (the floor plus 100) must stay below token.MaxEpoch.
const MaxEpochFloor = token.MaxEpoch - 1 - 100

// Latest is Restore.From's one value.
const Latest = "latest"

func (s *Stack) validateRestore(bad func(string, ...any)) {
	r := s.Restore
	if r.OldStoreStack != "" {
		bad("restore.%s: is the old name of restore.storeStack: set only storeStack", oldStoreStackKey)
	}
	if !r.Enabled() {
		if r.From != "" || len(r.Objects) > 0 || r.EpochFloor != 0 {
			bad("restore: set without restore.storeStack: name the snapshot store's stack")
		}
		return
	}
	if !name.MatchString(r.StoreStack) {
		bad("restore.storeStack: %q must be a stack name (lower-case letters, digits, dashes)", r.StoreStack)
	}
	if r.From != Latest {
		bad("restore.from: %q must be %s (pin a cluster's snapshot with restore.objects)", r.From, Latest)
	}
	clusters := map[string]bool{"coord": true}
	for i := 0; i < s.Entity.Shards; i++ {
		clusters[fmt.Sprintf("entity-%d", i)] = true
	}
	for c, obj := range r.Objects {
		if !clusters[c] {
			bad("restore.objects: %q is not a cluster of the region (coord, entity-0 ... entity-%d)", c, s.Entity.Shards-1)
		}
		if obj == "" {
			bad("restore.objects.%s: the manifest's object name is required (lockplane snapshot list)", c)
		}
	}
	// The unseal anchors coord at epochFloor plus its margin (100), and the
	// epoch allocator refuses an anchor at or above the last epoch a token
	// carries: a floor above that could never be unsealed.
	if r.EpochFloor < 0 || r.EpochFloor > MaxEpochFloor {
		bad("restore.epochFloor: %d must be an epoch from 0 to %d (a token carries epochs up to %d, and the unseal goes 100 above the floor): "+
			"the highest the region reached, from its audit archive", r.EpochFloor, MaxEpochFloor, token.MaxEpoch)
	}
	if s.Coord.EpochAbove != 0 {
		bad("coord.epochAbove: %d is for a coord cluster rebuilt empty; a restored one is anchored by the operators' advance (docs/dr.md)", s.Coord.EpochAbove)
	}
}

// validateRestoreInPlace checks the shards a region restores in place
// (docs/dr.md): entity shards only, from the region's own snapshot store.
func (s *Stack) validateRestoreInPlace(bad func(string, ...any)) {
	if len(s.RestoreInPlace) == 0 {
		return
	}
	switch {
	case s.Restore.Enabled():
		bad("restoreInPlace: a DR stack restores every cluster already; restore a shard in place in a running region's stack")
	case s.Snapshots.StoreStack == "":
		bad("restoreInPlace: needs the region's snapshot store: set snapshots.storeStack")
	}
	for shard, from := range s.RestoreInPlace {
		var i int
		if shard == "coord" {
			bad("restoreInPlace.coord: coord is never restored in place (the region's epochs are allocated from it, and an older coord could allocate them again): restore the region with a DR stack")
			continue
		}
		if _, err := fmt.Sscanf(shard, "entity-%d", &i); err != nil || fmt.Sprintf("entity-%d", i) != shard || i < 0 || i >= s.Entity.Shards {
			bad("restoreInPlace: %q is not an entity shard of the region (entity-0 ... entity-%d)", shard, s.Entity.Shards-1)
			continue
		}
		if from == "" {
			bad("restoreInPlace.%s: %q or a snapshot's name (lockplane snapshot list) is required", shard, Latest)
		} else if from != Latest && !strings.HasPrefix(from, shard+"/") {
			bad("restoreInPlace.%s: %q is not a snapshot of %s (its name starts %s/)", shard, from, shard, shard)
		}
	}
}
