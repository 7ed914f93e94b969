package dashboards_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/lockplane/lockplane/infra/monitoring/dashboards"
)

func TestDashboards(t *testing.T) {
	uids := map[string]string{"region.json": "lockplane-region", "owner.json": "lockplane-owner"}
	queries, err := dashboards.Queries()
	if err != nil {
		t.Fatal(err)
	}
	if len(queries) != len(uids) {
		t.Errorf("Queries() has %d dashboards, want %d", len(queries), len(uids))
	}
	for name, uid := range uids {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			UID    string `json:"uid"`
			Panels []struct {
				Title   string            `json:"title"`
				Targets []json.RawMessage `json:"targets"`
			} `json:"panels"`
		}
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if d.UID != uid {
			t.Errorf("%s: uid %q, want %q", name, d.UID, uid)
		}
		targets := 0
		for _, p := range d.Panels {
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no target", name, p.Title)
			}
			targets += len(p.Targets)
		}
		exprs := queries[name]
		if len(exprs) != targets || targets == 0 {
			t.Errorf("%s: Queries() has %d exprs for %d targets", name, len(exprs), targets)
		}
		for i, e := range exprs {
			if e == "" {
				t.Errorf("%s: target %d has an empty expr", name, i)
			}
		}
	}
}
