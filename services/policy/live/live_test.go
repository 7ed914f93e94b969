package live_test

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockplane/lockplane/services/policy/live"
)

// A reload that would move held keys to another tier is refused: the
// serving set keeps them where they are (a rehome is not an edit).
func TestAReloadThatMovesKeysToAnotherTierIsRefused(t *testing.T) {
	const doc = `apiVersion: lockplane.io/v1
kind: LockClass
metadata: {name: records}
spec: {namespace: team-a, purpose: efficiency, enforcement: advisory, ttl: 30s, tier: %s, prefixes: [team-a/records/]}
`
	dir := filepath.Join(t.TempDir(), "policies")
	os.MkdirAll(dir, 0o755)
	file := filepath.Join(dir, "classes.yaml")
	os.WriteFile(file, []byte(fmt.Sprintf(doc, "entity")), 0o644)
	live, err := live.New(dir, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(file, []byte(fmt.Sprintf(doc, "coord")), 0o644)
	if err := live.Reload(); err == nil || !strings.Contains(err.Error(), "team-a/records/") {
		t.Fatalf("reload moving team-a/records/ to coord: %v, want it refused naming the prefix", err)
	}
	if c, err := live.ForKey("team-a/records/1", ""); err != nil || c.Tier != "entity" {
		t.Fatalf("after the refused reload: %+v %v, want the entity class still serving", c, err)
	}
}
