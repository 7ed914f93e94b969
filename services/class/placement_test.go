package class_test

import (
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
)

func TestPlacementIsWhereKeysLiveNotHowClassesAreNamed(t *testing.T) {
	ledger := class.Class{Name: "ledger", TTL: 10 * time.Second, Tier: class.TierEntity, Prefixes: []string{"payments/ledger/"}}
	base := class.Placement(class.NewStatic(ledger))
	same := map[string]class.Static{
		"another class name and TTL":      class.NewStatic(class.Class{Name: "books", TTL: time.Minute, Tier: class.TierEntity, Prefixes: []string{"payments/ledger"}}),
		"a coord class without prefixes":  class.NewStatic(ledger, class.Class{Name: "fast", TTL: time.Second, Tier: class.TierCoord}),
		"a same-tier prefix below":        class.NewStatic(ledger, class.Class{Name: "close", TTL: time.Second, Tier: class.TierEntity, Prefixes: []string{"payments/ledger/close/"}}),
		"a coord prefix at the root tier": class.NewStatic(ledger, class.Class{Name: "settle", TTL: time.Second, Tier: class.TierCoord, Prefixes: []string{"payments/settle/"}}),
	}
	for name, s := range same {
		if got := class.Placement(s); got != base {
			t.Errorf("%s: placement %s, want %s (every key on the same tier)", name, got, base)
		}
	}
	moved := map[string]class.Static{
		"no entity prefix":         class.NewStatic(),
		"the close prefix rehomed": class.NewStatic(ledger, class.Class{Name: "close", TTL: time.Second, Tier: class.TierCoord, Prefixes: []string{"payments/ledger/close/"}}),
		"another entity prefix":    class.NewStatic(class.Class{Name: "ledger", TTL: 10 * time.Second, Tier: class.TierEntity, Prefixes: []string{"payments/"}}),
		"the default on entity": {class.DefaultName: {Name: class.DefaultName, TTL: time.Second, Tier: class.TierEntity},
			"ledger": ledger},
	}
	for name, s := range moved {
		if got := class.Placement(s); got == base {
			t.Errorf("%s: placement %s equals the base's, yet keys moved tier", name, got)
		}
	}
}

// A digest is stable: the same registry, built in any order, gives the
// same string, and one placement agrees with Rehomed finding nothing.
func TestPlacementAgreesWithRehomed(t *testing.T) {
	a := class.Class{Name: "a", TTL: time.Second, Tier: class.TierEntity, Prefixes: []string{"x/", "y/z/"}}
	b := class.Class{Name: "b", TTL: time.Second, Tier: class.TierCoord, Prefixes: []string{"x/c/"}}
	regs := []class.Static{class.NewStatic(a, b), class.NewStatic(b, a), class.NewStatic(a), class.NewStatic(b), class.NewStatic()}
	for i, r := range regs {
		for j, s := range regs {
			samePlace := class.Placement(r) == class.Placement(s)
			if rehomed := class.Rehomed(r, s); samePlace != (len(rehomed) == 0) {
				t.Errorf("registries %d and %d: same placement %v, but Rehomed finds %v", i, j, samePlace, rehomed)
			}
		}
	}
}
