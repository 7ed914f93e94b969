package class

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strings"
)

// Placement is a digest of where s puts keys: two registries have the same
// placement exactly when they put every key on the same tier, whatever
// their class names, TTLs, or prefixes that keep keys on the tier they
// would be on anyway. The epoch record carries it (epoch.Record.Placement)
// so that arbiters serving registries that disagree on a key's tier never
// both grant on one cluster (ADR-07: moving keys is a rehome).
//
// It lists every prefix point of s (as Rehomed computes them, the root ""
// standing for keys no prefix covers, on the default class's tier) whose
// tier differs from its nearest covering point's, sorted, and hashes them.
func Placement(s Static) string {
	tiers := map[string]Tier{}
	for _, p := range s.points() {
		tiers[p] = s.tierOf(p + "\x00")
	}
	var lines []string
	for _, p := range slices.Sorted(maps.Keys(tiers)) {
		if p == "" || tiers[p] != tiers[nearestCovering(tiers, p)] {
			lines = append(lines, p+"\t"+string(tiers[p])+"\n")
		}
	}
	sum := sha256.Sum256([]byte(strings.Join(lines, "")))
	return hex.EncodeToString(sum[:8])
}

// points are the root "" and s's prefixes, each ending in "/".
func (s Static) points() []string {
	points := map[string]bool{"": true}
	for _, c := range s {
		for _, p := range c.Prefixes {
			points[strings.TrimSuffix(p, "/")+"/"] = true
		}
	}
	return slices.Collect(maps.Keys(points))
}

// nearestCovering is the longest point other than p that covers the keys
// below p: the root "" when no other does.
func nearestCovering(points map[string]Tier, p string) string {
	best := ""
	for q := range points {
		if len(q) > len(best) && len(q) < len(p) && strings.HasPrefix(p, q) {
			best = q
		}
	}
	return best
}
