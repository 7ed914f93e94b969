package program_test

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The local stack's monitor-1 runs Prometheus and Alertmanager; Prometheus
// scrapes every etcd member (with its cluster), both arbiters and every
// snapshot job, and evaluates the shipped rules; Alertmanager routes the
// demo namespace's alerts to its owner.
func TestTheMonitorScrapesTheWholeRegionAndRoutesByOwner(t *testing.T) {
	m, err := run(t, "local", localHosts)
	if err != nil {
		t.Fatal(err)
	}
	prom, am := services(m, "prometheus"), services(m, "alertmanager")
	if len(prom) != 1 || len(am) != 1 || prom[0].Inputs["connection"].ObjectValue()["host"].StringValue() != "10.231.0.26" {
		t.Fatalf("prometheus %d, alertmanager %d services, want one each on monitor-1", len(prom), len(am))
	}
	if cmd := strs(prom[0].Inputs["command"]); !strings.Contains(strings.Join(cmd, " "), "--web.listen-address=10.231.0.26:9090") {
		t.Fatalf("prometheus: %v", cmd)
	}
	if r := prom[0].Inputs["ready"].ObjectValue(); !strings.HasSuffix(strings.Join(strs(r["command"]), " "), "http://10.231.0.26:9090/-/ready") {
		t.Fatalf("prometheus's readiness check: %v", r)
	}
	files := map[string]string{}
	for _, r := range m.of("lockplane:nodes:File") {
		if p := r.Inputs["path"].StringValue(); strings.Contains(p, "/monitoring/") {
			c := r.Inputs["content"]
			if c.IsSecret() {
				c = c.SecretValue().Element
				if !strings.HasSuffix(p, "alertmanager.yml") {
					t.Errorf("%s is secret", p)
				}
			} else if strings.HasSuffix(p, "alertmanager.yml") {
				t.Errorf("alertmanager.yml, whose webhooks may carry secrets, is not secret in the state")
			}
			if mode := r.Inputs["mode"].StringValue(); strings.HasSuffix(p, "alertmanager.yml") && mode != "0600" {
				t.Errorf("alertmanager.yml has mode %s, want 0600", mode)
			}
			files[p[strings.Index(p, "/monitoring/")+len("/monitoring/"):]] = c.StringValue()
		}
	}
	for _, f := range []string{"prometheus.yml", "alertmanager.yml", "rules/etcd.yml", "rules/lockplane.yml"} {
		if files[f] == "" {
			t.Fatalf("no %s on monitor-1 (have %d files)", f, len(files))
		}
	}
	var cfg struct {
		RuleFiles     []string `json:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `json:"job_name"`
			StaticConfigs []struct {
				Targets []string          `json:"targets"`
				Labels  map[string]string `json:"labels"`
			} `json:"static_configs"`
		} `json:"scrape_configs"`
	}
	if err := yaml.Unmarshal([]byte(files["prometheus.yml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	targets := map[string]int{}
	for _, j := range cfg.ScrapeConfigs {
		for _, sc := range j.StaticConfigs {
			targets[j.JobName] += len(sc.Targets)
			if j.JobName == "etcd" && sc.Labels["cluster"] == "" {
				t.Errorf("etcd target %v has no cluster label", sc.Targets)
			}
		}
	}
	// 5 coord and 3 entity-0 members, 2 arbiters, a snapshot job per member.
	if targets["etcd"] != 8 || targets["lockplane-arbiter"] != 2 || targets["lockplane-snapshot"] != 8 || len(cfg.RuleFiles) != 2 {
		t.Fatalf("targets %v, rule files %v", targets, cfg.RuleFiles)
	}
	if a := files["alertmanager.yml"]; !strings.Contains(a, `namespace=~"demo"`) || !strings.Contains(a, "http://10.231.0.1:9099/demo") ||
		!strings.Contains(a, "http://10.231.0.1:9099/platform") {
		t.Fatalf("alertmanager.yml does not route demo to its owner:\n%s", a)
	}
}

// Bad monitoring settings are refused by field before anything is made.
func TestMonitoringSettingsAreValidated(t *testing.T) {
	for set, want := range map[string]string{
		`{"every":"0s"}`:                      `monitoring.every: "0s" must be a duration from 1s to 1m`,
		`{"every":"2m"}`:                      `monitoring.every: "2m" must be a duration from 1s to 1m`,
		`{"retention":"2y"}`:                  `monitoring.retention: "2y" must be a duration from 1h to 400d`,
		`{"prometheusPort":9093}`:             "monitoring.alertmanagerPort: 9093 is Prometheus's port too",
		`{"platformWebhook":"hooks.example"}`: `monitoring.platformWebhook: "hooks.example" must be an http or https URL`,
		`{"alertmanagerPort":70000}`:          "monitoring.alertmanagerPort: 70000 is not a port",
	} {
		m, err := run(t, "local", func(c map[string]string) {
			localHosts(c)
			c["lockplane:monitoring"] = set
		})
		if err == nil || !strings.Contains(err.Error(), want) || len(m.res) != 0 {
			t.Errorf("%s: %v (%d resources), want %q", set, err, len(m.res), want)
		}
	}
}
