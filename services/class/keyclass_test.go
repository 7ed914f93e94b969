package class_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
)

var (
	ledger = class.Class{Name: "ledger", TTL: 10 * time.Second, Tier: class.TierEntity, Prefixes: []string{"pay/ledger/"}}
	closer = class.Class{Name: "close", TTL: 30 * time.Second, Tier: class.TierCoord, Prefixes: []string{"pay/ledger/close/"}}
	fast   = class.Class{Name: "fast", TTL: 3 * time.Second, Tier: class.TierCoord}
)

// Every key has one class: the longest prefix's, else the request's among
// the classes without prefixes, which share the default tier.
func TestEveryKeyResolvesToOneClass(t *testing.T) {
	s := class.NewStatic(ledger, closer, fast)
	if err := class.Check(s); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ key, named, want, wrong string }{
		{"pay/ledger/1", "", "ledger", ""},
		{"pay/ledger/1", "ledger", "ledger", ""},
		{"pay/ledger/1", "fast", "", "ledger"},
		{"pay/ledger/close/1", "ledger", "", "close"},
		{"pay/ledger", "", "default", ""}, // a prefix covers keys below it, not itself
		{"team-a/x", "fast", "fast", ""},
		{"team-a/x", "ledger", "", "default"},
	} {
		got, err := s.ForKey(c.key, c.named)
		var wrong *class.WrongClassError
		switch {
		case c.wrong != "" && (!errors.As(err, &wrong) || wrong.Want != c.wrong):
			t.Errorf("%s named %q: %v, want WrongClassError naming %s", c.key, c.named, err, c.wrong)
		case c.wrong == "" && (err != nil || got.Name != c.want):
			t.Errorf("%s named %q: %s (%v), want %s", c.key, c.named, got.Name, err, c.want)
		}
	}
	if _, err := s.ForKey("team-a/x", "nope"); !errors.As(err, new(class.ErrUnknown)) {
		t.Errorf("an unknown class: %v", err)
	}
}

func TestARegistryWithAKeyOnTwoTiersIsRefused(t *testing.T) {
	unprefixed := class.Class{Name: "entity", TTL: 3 * time.Second, Tier: class.TierEntity}
	if err := class.Check(class.NewStatic(unprefixed)); err == nil {
		t.Error("an entity class without prefixes beside the coord default passed")
	}
	twin := closer
	twin.Name, twin.Prefixes = "twin", []string{"pay/ledger/"}
	if err := class.Check(class.NewStatic(ledger, twin)); err == nil {
		t.Error("two classes declaring one prefix passed")
	}
}

// A registry that would move held keys to another tier is a rehome.
func TestRehomedNamesThePrefixesThatChangeTier(t *testing.T) {
	cur := class.NewStatic(ledger, closer)
	moved := ledger
	moved.Tier = class.TierCoord
	if got := class.Rehomed(cur, class.NewStatic(moved, closer)); !slices.Equal(got, []string{"pay/ledger/"}) {
		t.Errorf("ledger to coord: %v", got)
	}
	if got := class.Rehomed(cur, class.NewStatic(closer)); !slices.Equal(got, []string{"pay/ledger/"}) {
		t.Errorf("ledger dropped (its keys fall to the coord default): %v", got)
	}
	longer := ledger
	longer.TTL = time.Minute
	if got := class.Rehomed(cur, class.NewStatic(longer, closer)); len(got) != 0 {
		t.Errorf("a TTL change moved %v", got)
	}
}
