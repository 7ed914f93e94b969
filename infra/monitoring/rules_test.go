package monitoring_test

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/lockplane/lockplane/infra/monitoring"
	"github.com/lockplane/lockplane/services/resourcetest"
	"sigs.k8s.io/yaml"
)

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Record      string            `json:"record"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

type testFile struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		AlertRuleTest []struct {
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		resourcetest.Unavailable(t, "promtool", "install Debian's prometheus package (.ci/run does)", err)
	}
	return p
}

// Every rule file loads, and every promtool unit test passes.
func TestRulesLoadAndTheirUnitTestsPass(t *testing.T) {
	bin := promtool(t)
	files, _ := filepath.Glob("rules/*.yml")
	for _, f := range files {
		args := []string{"check", "rules", f}
		if strings.HasSuffix(f, "_test.yml") {
			args = []string{"test", "rules", f}
		}
		if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// Every alert has a unit test in which it fires and one in which it does
// not, a severity, a summary, and a runbook section in
// docs/observability.md; client-health alerts (no team label) are routed
// by namespace, so they keep it.
func TestEveryAlertIsTestedBothWaysAndHasARunbook(t *testing.T) {
	doc, err := os.ReadFile("../../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, h := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(string(doc), -1) {
		anchors[strings.ToLower(strings.ReplaceAll(strings.TrimSpace(h[1]), " ", "-"))] = true
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	tests, _ := filepath.Glob("rules/*_test.yml")
	for _, f := range tests {
		var tf testFile
		readYAML(t, f, &tf)
		for _, c := range tf.Tests {
			for _, a := range c.AlertRuleTest {
				if len(a.ExpAlerts) > 0 {
					fires[a.Alertname] = true
				} else {
					quiet[a.Alertname] = true
				}
			}
		}
	}
	var alerts []string
	err = fs.WalkDir(monitoring.Rules(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(monitoring.Rules(), p)
		if err != nil {
			return err
		}
		var rf ruleFile
		if err := yaml.UnmarshalStrict(b, &rf); err != nil {
			t.Errorf("%s: %v", p, err)
		}
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				if r.Alert == "" {
					continue
				}
				alerts = append(alerts, r.Alert)
				switch {
				case !fires[r.Alert]:
					t.Errorf("%s: %s never fires in a unit test", p, r.Alert)
				case !quiet[r.Alert]:
					t.Errorf("%s: %s has no unit test in which it stays quiet", p, r.Alert)
				}
				if r.Labels["severity"] != "critical" && r.Labels["severity"] != "warning" {
					t.Errorf("%s: %s: severity %q, want critical or warning", p, r.Alert, r.Labels["severity"])
				}
				if r.Annotations["summary"] == "" {
					t.Errorf("%s: %s has no summary", p, r.Alert)
				}
				anchor, ok := strings.CutPrefix(r.Annotations["runbook"], "docs/observability.md#")
				if !ok || !anchors[anchor] {
					t.Errorf("%s: %s: runbook %q is not a section of docs/observability.md", p, r.Alert, r.Annotations["runbook"])
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(alerts) < 20 || slices.Contains(alerts, "") {
		t.Fatalf("alerts %v", alerts)
	}
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
