package components

import (
	"fmt"
	"io/fs"
	"path"

	"github.com/lockplane/lockplane/infra/monitoring"
	"github.com/lockplane/lockplane/infra/nodes"
	"github.com/lockplane/lockplane/infra/topology"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// PrometheusBin and AlertmanagerBin are where Debian's prometheus and
// prometheus-alertmanager packages put the servers. The program does not
// install them: a monitoring host has the packages installed (their own
// services disabled); test hosts share this machine's filesystem.
const (
	PrometheusBin   = "/usr/bin/prometheus"
	AlertmanagerBin = "/usr/bin/prometheus-alertmanager"
)

// Monitor is the region's monitoring host: Prometheus, which scrapes
// every service of the region and evaluates the repository's alerting
// rules (infra/monitoring), and Alertmanager, which routes each alert to
// the platform or to the owner of the namespace it is about.
type Monitor struct {
	pulumi.ResourceState
	Host topology.Host
	// PrometheusURL and AlertmanagerURL are their HTTP APIs.
	PrometheusURL, AlertmanagerURL string
	Prometheus, Alertmanager       *nodes.Service
}

// MonitorArgs place the monitor and say what it watches and who is told.
type MonitorArgs struct {
	Host    topology.Host
	Targets []monitoring.Target
	// Owners are the namespaces' owners, from the policy set.
	Owners map[string]monitoring.Owner
}

// MonitorTargets are the region's scrape targets: every etcd member (its
// plain-HTTP metrics listener), every arbiter, every snapshot job, and
// the monitor's own two servers, each labelled with its host and, for
// etcd, its cluster.
func MonitorTargets(env *Env, p *topology.Plan, monitor topology.Host) []monitoring.Target {
	s := env.Stack
	var out []monitoring.Target
	add := func(job string, h topology.Host, port int, cluster string) {
		l := map[string]string{"host": h.Name}
		if cluster != "" {
			l["cluster"] = cluster
		}
		out = append(out, monitoring.Target{Job: job, Address: fmt.Sprintf("%s:%d", h.Address, port), Labels: l})
	}
	clusters := map[string][]topology.Member{"coord": p.Coord}
	names := []string{"coord"}
	for i, members := range p.Shards {
		n := fmt.Sprintf("entity-%d", i)
		clusters[n], names = members, append(names, n)
	}
	for _, c := range names {
		for _, m := range clusters[c] {
			add(monitoring.JobEtcd, m.Host, s.Etcd.MetricsPort(), c)
		}
	}
	for _, h := range p.Arbiters {
		add(monitoring.JobArbiter, h, s.Arbiter.Metrics, "")
	}
	if s.Snapshots.Enabled() {
		for _, c := range names {
			for _, m := range clusters[c] {
				add(monitoring.JobSnapshot, m.Host, s.Snapshots.MetricsPort, c)
			}
		}
	}
	add(monitoring.JobPrometheus, monitor, s.Monitoring.PrometheusPort, "")
	add(monitoring.JobAlertmanager, monitor, s.Monitoring.AlertmanagerPort, "")
	return out
}

// NewMonitor puts the configuration and the rules on the monitoring host
// and runs Prometheus and Alertmanager, each restarted when its files
// change and made only once it answers /-/ready.
func NewMonitor(ctx *pulumi.Context, env *Env, a MonitorArgs, opts ...pulumi.ResourceOption) (*Monitor, error) {
	s := env.Stack
	h := a.Host
	promAddr := fmt.Sprintf("%s:%d", h.Address, s.Monitoring.PrometheusPort)
	amAddr := fmt.Sprintf("%s:%d", h.Address, s.Monitoring.AlertmanagerPort)
	m := &Monitor{Host: h, PrometheusURL: "http://" + promAddr, AlertmanagerURL: "http://" + amAddr}
	name := s.Region + "-monitor-" + h.Name
	if err := ctx.RegisterComponentResource("lockplane:infra:Monitor", name, m, opts...); err != nil {
		return nil, err
	}
	in := pulumi.Parent(m)
	conn := env.Connection(h)

	var promFiles []configFile
	var ruleFiles []string
	err := fs.WalkDir(monitoring.Rules(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(monitoring.Rules(), p)
		if err != nil {
			return err
		}
		f := env.ConfPath(h, path.Join("monitoring/rules", p))
		ruleFiles = append(ruleFiles, f)
		promFiles = append(promFiles, configFile{f, pulumi.String(string(b)), "0644"})
		return nil
	})
	if err != nil {
		return nil, err
	}
	promCfg, err := monitoring.PrometheusConfig(monitoring.Prometheus{Targets: a.Targets, RuleFiles: ruleFiles, Alertmanager: amAddr,
		Every: s.Monitoring.EveryDuration()})
	if err != nil {
		return nil, err
	}
	amCfg, err := monitoring.AlertmanagerConfig(s.Monitoring.PlatformWebhook, a.Owners)
	if err != nil {
		return nil, fmt.Errorf("monitoring: %w", err)
	}
	promPath, amPath := env.ConfPath(h, "monitoring/prometheus.yml"), env.ConfPath(h, "monitoring/alertmanager.yml")
	promFiles = append(promFiles, configFile{promPath, pulumi.String(promCfg), "0644"})
	probe, err := probeBinary(ctx, env, h)
	if err != nil {
		return nil, err
	}

	// Secret, and readable by root only: a webhook's URL may carry its
	// receiver's secret.
	amDeps, amTriggers, err := putConfig(ctx, conn, name, []configFile{{amPath, pulumi.ToSecret(pulumi.String(amCfg)).(pulumi.StringOutput), "0600"}}, in)
	if err != nil {
		return nil, err
	}
	if m.Alertmanager, err = nodes.NewService(ctx, name+"-alertmanager", nodes.ServiceArgs{Connection: conn, Name: "alertmanager",
		Mode: s.SSH.ServiceMode, StateDir: env.StateDir(h),
		// No peers: one Alertmanager per region (--cluster.listen-address
		// empty turns its gossip off).
		Command: pulumi.ToStringArray([]string{AlertmanagerBin, "--config.file=" + amPath,
			"--storage.path=" + h.HostPath("/var/lib/lockplane/alertmanager"), "--web.listen-address=" + amAddr, "--cluster.listen-address="}),
		Triggers: amTriggers, Ready: readyHTTP(env, h, amAddr)}, in, pulumi.DependsOn(append(amDeps, probe))); err != nil {
		return nil, err
	}
	promDeps, promTriggers, err := putConfig(ctx, conn, name, promFiles, in)
	if err != nil {
		return nil, err
	}
	if m.Prometheus, err = nodes.NewService(ctx, name+"-prometheus", nodes.ServiceArgs{Connection: conn, Name: "prometheus",
		Mode: s.SSH.ServiceMode, StateDir: env.StateDir(h),
		Command: pulumi.ToStringArray([]string{PrometheusBin, "--config.file=" + promPath,
			"--storage.tsdb.path=" + h.HostPath("/var/lib/lockplane/prometheus"), "--storage.tsdb.retention.time=" + s.Monitoring.Retention,
			"--web.listen-address=" + promAddr}),
		Triggers: promTriggers, Ready: readyHTTP(env, h, promAddr)}, in, pulumi.DependsOn(append(promDeps, probe, m.Alertmanager))); err != nil {
		return nil, err
	}
	return m, ctx.RegisterResourceOutputs(m, pulumi.Map{"host": pulumi.String(h.Name),
		"prometheusUrl": pulumi.String(m.PrometheusURL), "alertmanagerUrl": pulumi.String(m.AlertmanagerURL)})
}

// readyHTTP is Prometheus's and Alertmanager's check: /-/ready, 200 once
// they serve.
func readyHTTP(env *Env, h topology.Host, addr string) *nodes.ReadyCheck {
	c := nodeProbe(env, h, "http", "http://"+addr+"/-/ready")
	c.Listens = []string{addr}
	return c
}
