package monitoring_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockplane/lockplane/infra/monitoring"
	"github.com/lockplane/lockplane/services/resourcetest"
)

func tool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		resourcetest.Unavailable(t, name, "install Debian's "+pkg+" package (.ci/run does)", err)
	}
	return p
}

// The generated prometheus.yml loads, with the shipped rules.
func TestThePrometheusConfigLoads(t *testing.T) {
	bin := tool(t, "promtool", "prometheus")
	dir := t.TempDir()
	var rules []string
	for _, f := range []string{"etcd.yml", "lockplane.yml"} {
		b, err := os.ReadFile(filepath.Join("rules", f))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, f)
		os.WriteFile(p, b, 0o644)
		rules = append(rules, p)
	}
	cfg, err := monitoring.PrometheusConfig(monitoring.Prometheus{RuleFiles: rules, Alertmanager: "10.0.0.26:9093", Targets: []monitoring.Target{
		{Job: monitoring.JobEtcd, Address: "10.0.0.11:2381", Labels: map[string]string{"cluster": "coord", "host": "coord-1"}},
		{Job: monitoring.JobArbiter, Address: "10.0.0.21:9443", Labels: map[string]string{"host": "arbiter-1"}},
		{Job: monitoring.JobEtcd, Address: "10.0.0.16:2381", Labels: map[string]string{"cluster": "entity-0", "host": "entity-1"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "prometheus.yml")
	os.WriteFile(p, []byte(cfg), 0o644)
	if out, err := exec.Command(bin, "check", "config", p).CombinedOutput(); err != nil {
		t.Fatalf("promtool check config: %v\n%s\n%s", err, out, cfg)
	}
	if strings.Count(cfg, "job_name: etcd") != 1 || !strings.Contains(cfg, "cluster: entity-0") {
		t.Fatalf("one etcd job with each member's labels:\n%s", cfg)
	}
	if _, err := monitoring.PrometheusConfig(monitoring.Prometheus{Targets: []monitoring.Target{{Job: "etcd"}}}); err == nil {
		t.Fatal("a target without an address was accepted")
	}
}

// Alertmanager's routes: infrastructure alerts to the platform, each
// namespace's to its owner, a namespace without one to the platform.
func TestAlertsAreRoutedToTheNamespacesOwner(t *testing.T) {
	bin := tool(t, "amtool", "prometheus-alertmanager")
	cfg, err := monitoring.AlertmanagerConfig("http://10.0.0.99:9099/platform", map[string]monitoring.Owner{
		"payments":        {Team: "payments-sre", Webhook: "https://alerts.payments.example/lockplane"},
		"payments.ledger": {Team: "payments-sre", Webhook: "https://alerts.payments.example/lockplane"},
		"search":          {Team: "search", Webhook: "http://10.0.0.98:9099/search"},
	})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "alertmanager.yml")
	os.WriteFile(p, []byte(cfg), 0o644)
	if out, err := exec.Command(bin, "check-config", p).CombinedOutput(); err != nil {
		t.Fatalf("amtool check-config: %v\n%s\n%s", err, out, cfg)
	}
	if strings.Count(cfg, "follow_redirects: false") != 3 {
		t.Fatalf("every webhook must refuse redirects:\n%s", cfg)
	}
	for _, c := range []struct {
		labels []string
		want   string
	}{
		{[]string{"alertname=EtcdNoLeader", "team=platform", "cluster=coord"}, "platform"},
		{[]string{"alertname=LockplaneExpiriesWithoutRelease", "namespace=payments", "class=ledger"}, "payments-sre"},
		{[]string{"alertname=LockplaneExpiriesWithoutRelease", "namespace=payments.ledger"}, "payments-sre"},
		{[]string{"alertname=LockplaneExpiriesWithoutRelease", "namespace=paymentsXledger"}, "platform"},
		{[]string{"alertname=LockplaneQueueStalled", "namespace=search"}, "search"},
		{[]string{"alertname=LockplaneQueueStalled", "namespace=unowned"}, "platform"},
	} {
		args := append([]string{"config", "routes", "test", "--config.file", p, "--verify.receivers", c.want}, c.labels...)
		if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			t.Errorf("%v: want %s: %v\n%s", c.labels, c.want, err, out)
		}
	}
	if _, err := monitoring.AlertmanagerConfig("", map[string]monitoring.Owner{"a": {Team: "platform", Webhook: "http://x/"}}); err == nil {
		t.Error("an owner team named platform was accepted")
	}
}
