// Package deps checks what each part of the product may link: the
// layers point one way, and no shipped binary carries a benchmark, a
// test kit, or a server it does not run.
package deps

import (
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/lockplane/lockplane/"

// rules: for each package, the import paths (prefixes; a trailing "$"
// means that package alone) it must not link, and why.
var rules = []struct {
	pkg    string
	banned []string
	why    string
}{
	{"services/policy", []string{mod + "services/internal/arbiter", mod + "services/audit/chstore", mod + "services/pausetest$", "github.com/jackc/pgx", "github.com/minio/minio-go"},
		"the policy validator runs in lockctl, the Pulumi program and the provider: documents only, no server, store or fence"},
	{"nodes/provider", []string{mod + "services/internal/arbiter", mod + "services/audit/chstore", mod + "services/pausetest$", "github.com/jackc/pgx"},
		"the host provider makes hosts, files, services and buckets (MinIO is its own): it runs no arbiter, audit query or fence"},
	{"infra/program", []string{mod + "services/internal/arbiter", mod + "services/audit/chstore", mod + "services/pausetest$", "github.com/jackc/pgx"},
		"the Pulumi program describes a region: it runs no arbiter, audit query or fence"},
	{"services/audit/chstore", []string{mod + "services/client/lockclient"},
		"the audit store needs the clients' renewal rate (services/client/protocol), not the client"},
	{"services/fanin", []string{mod + "services/client/lockclient"},
		"the fan-in control plane needs the routing header's name (services/client/protocol), not the client"},
	{"services/cmd/lockplane-snapshot", []string{mod + "services/audit", mod + "services/internal/arbiter"},
		"the snapshot job copies etcd to the snapshot store under its own election (services/election): it reads no audit log and runs no arbiter"},
}

// kits are what no shipped binary may link: benchmarks and test kits.
var kits = []string{mod + "benchmarks/", mod + "test/", mod + "services/devenv/devenvtest", mod + "services/resourcetest",
	mod + "services/spire/spiretest", mod + "services/audit/audittest"}

// shipped are the binaries a deployment runs: every main package under
// services/cmd and nodes/cmd.
func shipped(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", `{{if eq .Name "main"}}{{.ImportPath}}{{end}}`, "../../services/cmd/...", "../../nodes/cmd/...").Output()
	if err != nil {
		t.Fatalf("go list the commands: %v", err)
	}
	var cmds []string
	for _, p := range strings.Fields(string(out)) {
		cmds = append(cmds, strings.TrimPrefix(p, mod))
	}
	if len(cmds) < 8 {
		t.Fatalf("found %d commands (%v): the list is wrong", len(cmds), cmds)
	}
	return cmds
}

func deps(t *testing.T, pkg string, flags ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append(append([]string{"list", "-deps"}, flags...), mod+pkg)...).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// banned returns those of ds that a rule bans.
func banned(ds, rules []string) []string {
	var hits []string
	for _, d := range ds {
		for _, r := range rules {
			if exact, ok := strings.CutSuffix(r, "$"); ok && d == exact || !ok && strings.HasPrefix(d, r) {
				hits = append(hits, d)
				break
			}
		}
	}
	return hits
}

func TestEachPartLinksOnlyWhatItRuns(t *testing.T) {
	for _, r := range rules {
		if hits := banned(deps(t, r.pkg), r.banned); len(hits) > 0 {
			t.Errorf("%s links %s: %s", r.pkg, strings.Join(hits, ", "), r.why)
		}
	}
}

func TestNoShippedBinaryLinksABenchmarkOrTestKit(t *testing.T) {
	for _, b := range shipped(t) {
		if hits := banned(deps(t, b), kits); len(hits) > 0 {
			t.Errorf("%s links %s: a shipped binary carries no benchmark or test kit", b, strings.Join(hits, ", "))
		}
	}
}

// The rules can fail: the commands that run these parts link what the
// rules ban from the others.
func TestTheRulesCatchWhatTheyBan(t *testing.T) {
	for pkg, wants := range map[string][]string{
		"services/cmd/arbiter": {mod + "services/internal/arbiter", mod + "services/audit/chstore"},
		"services/cmd/lockctl": {mod + "services/pausetest$", "github.com/jackc/pgx/v5$"},
	} {
		ds := deps(t, pkg)
		for _, want := range wants {
			if len(banned(ds, []string{want})) == 0 {
				t.Errorf("%s does not link %s: the rule banning it is untested", pkg, want)
			}
		}
	}
	// A product package whose tests link kits: with its tests, caught.
	if len(banned(deps(t, "nodes/provider", "-test"), kits)) == 0 {
		t.Error("nodes/provider with its tests links no kit the rule catches: the kit rule is untested")
	}
}
