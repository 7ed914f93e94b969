package provider_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockplane/lockplane/nodes/provider"
)

// The unit systemd runs is one systemd accepts without a warning, and
// one whose restarts never stop at the start limit.
func TestUnitIsValidAndRestartsWithoutLimit(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	s := provider.ServiceInputs{Name: "arbiter", Mode: provider.ModeSystemd, Command: []string{"/bin/true", "--flag", "a b"},
		Env: map[string]string{"GOMAXPROCS": "2"}, WorkDir: "/"}
	unit := s.Unit()
	section := ""
	keys := map[string]string{}
	for _, line := range strings.Split(unit, "\n") {
		if strings.HasPrefix(line, "[") {
			section = line
		} else if k, v, ok := strings.Cut(line, "="); ok {
			keys[section+k] = v
		}
	}
	for k, want := range map[string]string{"[Unit]StartLimitIntervalSec": "0", "[Service]Restart": "always", "[Service]RestartSec": "5"} {
		if keys[k] != want {
			t.Errorf("%s = %q, want %q", k, keys[k], want)
		}
	}
	path := filepath.Join(t.TempDir(), "lockplane-arbiter.service")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	// Only what it says of this unit: it also loads the host's targets.
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || strings.Contains(string(out), path) {
		t.Fatalf("systemd-analyze verify: %v\n%s\nunit:\n%s", err, out, unit)
	}
}
