package metriclabels_test

import (
	"fmt"
	"testing"

	"github.com/lockplane/lockplane/services/metriclabels"
)

func TestValuesPastTheCapShareOneLabel(t *testing.T) {
	var n metriclabels.Values
	seen := map[string]bool{}
	for i := 0; i < 3*metriclabels.MaxValues; i++ {
		seen[n.Label(fmt.Sprintf("team-%d", i))] = true
	}
	if len(seen) != metriclabels.MaxValues+1 || !seen[metriclabels.Other] {
		t.Fatalf("%d label values, want %d and %q", len(seen), metriclabels.MaxValues+1, metriclabels.Other)
	}
	if got := n.Label("team-0"); got != "team-0" {
		t.Fatalf("a namespace under the cap became %q", got)
	}
}
