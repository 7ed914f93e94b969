package topology

import (
	"net/url"
	"strings"
	"time"
)

// RoleMonitor is the monitoring host's: Prometheus, which scrapes every
// service of the region and evaluates the alerting rules, and
// Alertmanager, which routes the alerts (docs/observability.md).
const RoleMonitor = "monitor"

// Monitoring is the region's monitoring host's settings; it is on when a
// host has role monitor.
type Monitoring struct {
	// PrometheusPort and AlertmanagerPort are on the monitoring host's
	// address (9090, 9093).
	PrometheusPort   int `json:"prometheusPort,omitempty"`
	AlertmanagerPort int `json:"alertmanagerPort,omitempty"`
	// Every is the scrape and rule evaluation interval (15s): 1s to 1m,
	// since the rules' rates look back 5 minutes.
	Every string `json:"every,omitempty"`
	// Retention is how long Prometheus keeps samples (15d): 1h to 400d.
	Retention string `json:"retention,omitempty"`
	// PlatformWebhook is where Alertmanager posts infrastructure alerts,
	// and those of namespaces without an owner; empty: they are shown in
	// Alertmanager only.
	PlatformWebhook string `json:"platformWebhook,omitempty"`
}

func (m *Monitoring) defaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&m.PrometheusPort, 9090)
	def(&m.AlertmanagerPort, 9093)
	if m.Every == "" {
		m.Every = "15s"
	}
	if m.Retention == "" {
		m.Retention = "15d"
	}
}

// MonitorHost is the host with role monitor, if any.
func (s *Stack) MonitorHost() (Host, bool) {
	for _, h := range s.Hosts {
		if h.Has(RoleMonitor) {
			return h, true
		}
	}
	return Host{}, false
}

// EveryDuration is Every, parsed (Validate checked it).
func (m Monitoring) EveryDuration() time.Duration {
	d, _ := time.ParseDuration(m.Every)
	return d
}

// validateMonitoring checks the monitoring settings and its one host.
func (s *Stack) validateMonitoring(bad func(string, ...any)) {
	var hosts []string
	for _, h := range s.Hosts {
		if h.Has(RoleMonitor) {
			hosts = append(hosts, h.Name)
		}
	}
	if len(hosts) > 1 {
		bad("hosts: %s have role monitor; a stack has at most one monitoring host", strings.Join(hosts, ", "))
	}
	m := s.Monitoring
	for _, p := range []struct {
		field string
		port  int
	}{{"monitoring.prometheusPort", m.PrometheusPort}, {"monitoring.alertmanagerPort", m.AlertmanagerPort}} {
		switch {
		case p.port < 1 || p.port > 65535:
			bad("%s: %d is not a port", p.field, p.port)
		case p.port == s.Arbiter.Port || p.port == s.Arbiter.Metrics || p.port == s.Arbiter.FanInPort || p.port == s.Audit.HTTPPort || p.port == s.Archive.Port || p.port == s.Spire.Port:
			bad("%s: %d is another service's port; the monitoring host may also have other roles", p.field, p.port)
		}
	}
	if m.PrometheusPort == m.AlertmanagerPort {
		bad("monitoring.alertmanagerPort: %d is Prometheus's port too", m.AlertmanagerPort)
	}
	if d, err := time.ParseDuration(m.Every); err != nil || d < time.Second || d > time.Minute {
		bad("monitoring.every: %q must be a duration from 1s to 1m, such as 15s: the rules' rates look back 5 minutes", m.Every)
	}
	if d, err := parseDays(m.Retention); err != nil || d < time.Hour || d > 400*24*time.Hour {
		bad("monitoring.retention: %q must be a duration from 1h to 400d, such as 15d", m.Retention)
	}
	if w := m.PlatformWebhook; w != "" {
		if u, err := url.Parse(w); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("monitoring.platformWebhook: %q must be an http or https URL with a host", w)
		}
	}
}

// parseDays is time.ParseDuration with Prometheus's d (days) too.
func parseDays(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		d, err := time.ParseDuration(n + "h")
		return 24 * d, err
	}
	return time.ParseDuration(s)
}
