package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The arbiter as shipped has none of the Admin API's rule-breaking
// switches: they are built only with the tests' lockplane_broken_rules
// tag. The check reads the symbols of the admin package as the arbiter
// links it (a binary would not do: the linker drops what nothing calls),
// and of the tagged build too, so it can fail: it would if the switches
// lost their tag.
func TestAShippedArbiterHasNoRuleBreakingSwitches(t *testing.T) {
	const pkg = "github.com/lockplane/lockplane/services/internal/arbiter/admin"
	deps, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil || !strings.Contains(string(deps), pkg+"\n") {
		t.Fatalf("the arbiter does not link %s (%v): the check below is of nothing", pkg, err)
	}
	switches := []string{"admin.BreakForceCompare", "admin.BreakTwoPersonRule", "admin.BreakClaimCompare"}
	symbols := func(tags ...string) string {
		archive := filepath.Join(t.TempDir(), "admin.a")
		args := append(append([]string{"build"}, tags...), "-o", archive, pkg)
		if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		out, err := exec.Command("go", "tool", "nm", archive).Output()
		if err != nil {
			t.Fatalf("go tool nm: %v", err)
		}
		return string(out)
	}
	shipped := symbols()
	for _, s := range switches {
		if strings.Contains(shipped, s) {
			t.Errorf("the shipped arbiter's admin package has %s", s)
		}
	}
	tagged := symbols("-tags", "lockplane_broken_rules")
	for _, s := range switches {
		if !strings.Contains(tagged, s) {
			t.Errorf("the test build lacks %s: the check above proves nothing", s)
		}
	}
}
