package monitoring

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Target is one scrape target: the job it belongs to, its host:port, and
// the labels the region knows it by (cluster, host).
type Target struct {
	Job     string
	Address string
	Labels  map[string]string
}

// Prometheus is what the monitoring host's Prometheus is given.
type Prometheus struct {
	Targets []Target
	// RuleFiles are the rule files' paths on the monitoring host.
	RuleFiles []string
	// Alertmanager is its host:port.
	Alertmanager string
	// Every is the scrape and rule evaluation interval (15 s when 0).
	Every time.Duration
}

// Jobs, in the order the configuration lists them; the rules select
// targets by these names.
const (
	JobEtcd         = "etcd"
	JobArbiter      = "lockplane-arbiter"
	JobSnapshot     = "lockplane-snapshot"
	JobPrometheus   = "prometheus"
	JobAlertmanager = "alertmanager"
)

type promConfig struct {
	Global struct {
		ScrapeInterval     string `json:"scrape_interval"`
		EvaluationInterval string `json:"evaluation_interval"`
	} `json:"global"`
	RuleFiles []string `json:"rule_files,omitempty"`
	Alerting  struct {
		Alertmanagers []struct {
			StaticConfigs []staticConfig `json:"static_configs"`
		} `json:"alertmanagers"`
	} `json:"alerting"`
	ScrapeConfigs []scrapeConfig `json:"scrape_configs"`
}

type scrapeConfig struct {
	JobName       string         `json:"job_name"`
	StaticConfigs []staticConfig `json:"static_configs"`
}

type staticConfig struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels,omitempty"`
}

// PrometheusConfig is prometheus.yml: one job per kind of target, each
// target with its own labels, the rule files, and the Alertmanager.
func PrometheusConfig(p Prometheus) (string, error) {
	every := p.Every
	if every == 0 {
		every = 15 * time.Second
	}
	var c promConfig
	c.Global.ScrapeInterval, c.Global.EvaluationInterval = every.String(), every.String()
	c.RuleFiles = p.RuleFiles
	c.Alerting.Alertmanagers = append(c.Alerting.Alertmanagers, struct {
		StaticConfigs []staticConfig `json:"static_configs"`
	}{[]staticConfig{{Targets: []string{p.Alertmanager}}}})
	jobs := map[string]*scrapeConfig{}
	var order []string
	for _, t := range p.Targets {
		if t.Job == "" || t.Address == "" {
			return "", fmt.Errorf("monitoring: target %+v: job and address are required", t)
		}
		j, ok := jobs[t.Job]
		if !ok {
			j = &scrapeConfig{JobName: t.Job}
			jobs[t.Job] = j
			order = append(order, t.Job)
		}
		j.StaticConfigs = append(j.StaticConfigs, staticConfig{Targets: []string{t.Address}, Labels: t.Labels})
	}
	for _, name := range order {
		c.ScrapeConfigs = append(c.ScrapeConfigs, *jobs[name])
	}
	b, err := yaml.Marshal(c)
	return string(b), err
}

// PlatformReceiver is the receiver of infrastructure alerts
// (team="platform") and of every alert no owner's route takes.
const PlatformReceiver = "platform"

// Owner is a namespace's owning team and its webhook.
type Owner struct{ Team, Webhook string }

type amConfig struct {
	Route     amRoute      `json:"route"`
	Receivers []amReceiver `json:"receivers"`
}

type amRoute struct {
	Receiver       string    `json:"receiver"`
	GroupBy        []string  `json:"group_by,omitempty"`
	GroupWait      string    `json:"group_wait,omitempty"`
	GroupInterval  string    `json:"group_interval,omitempty"`
	RepeatInterval string    `json:"repeat_interval,omitempty"`
	Matchers       []string  `json:"matchers,omitempty"`
	Routes         []amRoute `json:"routes,omitempty"`
}

type amReceiver struct {
	Name           string      `json:"name"`
	WebhookConfigs []amWebhook `json:"webhook_configs,omitempty"`
}

type amWebhook struct {
	URL          string       `json:"url"`
	SendResolved bool         `json:"send_resolved"`
	HTTPConfig   amHTTPConfig `json:"http_config"`
}

// amHTTPConfig: a redirect would take a post somewhere its URL's checks
// never saw.
type amHTTPConfig struct {
	FollowRedirects bool `json:"follow_redirects"`
}

// AlertmanagerConfig is alertmanager.yml: infrastructure alerts to the
// platform's webhook (none: they are only shown), each namespace's
// client-health alerts to its owner's, and the rest to the platform's.
// owners is by namespace.
func AlertmanagerConfig(platformWebhook string, owners map[string]Owner) (string, error) {
	platform := amReceiver{Name: PlatformReceiver}
	if platformWebhook != "" {
		platform.WebhookConfigs = []amWebhook{{URL: platformWebhook, SendResolved: true}}
	}
	c := amConfig{
		Route: amRoute{Receiver: PlatformReceiver, GroupBy: []string{"alertname", "cluster", "namespace"},
			GroupWait: "10s", GroupInterval: "1m", RepeatInterval: "4h",
			Routes: []amRoute{{Receiver: PlatformReceiver, Matchers: []string{`team="platform"`}}}},
		Receivers: []amReceiver{platform},
	}
	byTeam := map[string][]string{}
	hooks := map[string]string{}
	for ns, o := range owners {
		if o.Team == PlatformReceiver {
			return "", fmt.Errorf("namespace %s: owner team %q is the name of the platform's receiver", ns, o.Team)
		}
		if h, ok := hooks[o.Team]; ok && h != o.Webhook {
			// Not the URLs: they may hold a receiver's secret.
			return "", fmt.Errorf("team %s: two webhooks: a team has one", o.Team)
		}
		hooks[o.Team] = o.Webhook
		byTeam[o.Team] = append(byTeam[o.Team], regexp.QuoteMeta(ns))
	}
	teams := make([]string, 0, len(byTeam))
	for t := range byTeam {
		teams = append(teams, t)
	}
	slices.Sort(teams)
	for _, t := range teams {
		slices.Sort(byTeam[t])
		c.Route.Routes = append(c.Route.Routes, amRoute{Receiver: t,
			Matchers: []string{fmt.Sprintf(`namespace=~"%s"`, strings.Join(byTeam[t], "|"))}})
		c.Receivers = append(c.Receivers, amReceiver{Name: t, WebhookConfigs: []amWebhook{{URL: hooks[t], SendResolved: true}}})
	}
	b, err := yaml.Marshal(c)
	return string(b), err
}
