package program_test

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
)

// A stack written before the snapshot store was renamed (lockplane:vault,
// role vault, snapshots.vaultStack, restore.vaultStack) makes the same
// resources, with the same inputs, as the same stack in the new names: an
// existing stack's `up` changes nothing by the rename.
func TestOldSnapshotStoreNamesMakeTheSameStack(t *testing.T) {
	old := map[string]func(map[string]string){
		"local-snapshots": func(c map[string]string) {
			localHosts(c)
			c["lockplane:vault"], c["lockplane:snapshotStore"] = c["lockplane:snapshotStore"], ""
			delete(c, "lockplane:snapshotStore")
			c["lockplane:hosts"] = strings.Replace(c["lockplane:hosts"], `"snapshot-store"`, `"vault"`, 1)
		},
		"local": func(c map[string]string) {
			localHosts(c)
			c["lockplane:snapshots"] = strings.Replace(c["lockplane:snapshots"], `"storeStack"`, `"vaultStack"`, 1)
		},
		"local-dr": func(c map[string]string) {
			drStack(c)
			c["lockplane:restore"] = strings.Replace(c["lockplane:restore"], `"storeStack"`, `"vaultStack"`, 1)
		},
	}
	for stack, edit := range old {
		now, err := run(t, stack, newHosts(stack))
		if err != nil {
			t.Fatalf("%s: %v", stack, err)
		}
		was, err := run(t, stack, edit)
		if err != nil {
			t.Fatalf("%s in the old names: %v", stack, err)
		}
		a, b := fingerprint(now), fingerprint(was)
		for i := range max(len(a), len(b)) {
			if i >= len(a) || i >= len(b) || a[i] != b[i] {
				t.Errorf("%s: the old names make another stack, from resource %d:\nnew: %.400s\nold: %.400s", stack, i, at(a, i), at(b, i))
				break
			}
		}
		if len(now.res) < 10 {
			t.Errorf("%s: %d resources: the comparison saw too little", stack, len(now.res))
		}
	}
}

// Both names at once is refused, naming the old one.
func TestOldAndNewSnapshotStoreNamesTogetherAreRefused(t *testing.T) {
	for _, c := range []struct {
		stack string
		edit  func(map[string]string)
		want  string
	}{
		{"local-snapshots", func(c map[string]string) { localHosts(c); c["lockplane:vault"] = c["lockplane:snapshotStore"] },
			"vault: is the old name of snapshotStore: set only snapshotStore"},
		{"local", func(c map[string]string) {
			localHosts(c)
			c["lockplane:snapshots"] = strings.Replace(c["lockplane:snapshots"], `"storeStack"`, `"vaultStack":"local-snapshots","storeStack"`, 1)
		}, "snapshots.vaultStack: is the old name of snapshots.storeStack"},
		{"local-dr", func(c map[string]string) {
			drStack(c)
			c["lockplane:restore"] = strings.Replace(c["lockplane:restore"], `"storeStack"`, `"vaultStack":"local-snapshots","storeStack"`, 1)
		}, "restore.vaultStack: is the old name of restore.storeStack"},
	} {
		if _, err := run(t, c.stack, c.edit); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want %q", c.stack, err, c.want)
		}
	}
}

func newHosts(stack string) func(map[string]string) {
	if stack == "local-dr" {
		return drStack
	}
	return localHosts
}

var tempDir = regexp.MustCompile(`/tmp/Test[^/ ]*/[0-9]+/`)

func at(rows []string, i int) string {
	if i < len(rows) {
		return rows[i]
	}
	return "(none)"
}

// fingerprint is every registered resource's type, name and inputs, in
// order of name.
func fingerprint(m *mocks) []string {
	var rows []string
	for _, r := range m.res {
		in := r.Inputs.MapRepl(nil, func(v resource.PropertyValue) (any, bool) {
			if v.IsSecret() {
				// Each run makes its own SSH key.
				if e := v.SecretValue().Element; e.IsString() && strings.HasPrefix(e.StringValue(), "-----BEGIN OPENSSH PRIVATE KEY") {
					return "secret(ssh key)", true
				}
				return fmt.Sprintf("secret(%v)", v.SecretValue().Element.Mappable()), true
			}
			return nil, false
		})
		// Each run stages the binaries in its own temporary directory.
		rows = append(rows, tempDir.ReplaceAllString(fmt.Sprintf("%s %s %v", r.TypeToken, r.Name, in), "BIN/"))
	}
	sort.Strings(rows)
	return rows
}
