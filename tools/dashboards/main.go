// Command dashboards generates Lockplane's Grafana SLO dashboards as JSON files.
//
// Run it in tools/dashboards: `go run . -out ../../infra/monitoring/dashboards`
// writes region.json and owner.json; with -check it writes nothing and exits 1,
// naming each file on disk that differs from what it would write.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

func main() {
	out := flag.String("out", "../../infra/monitoring/dashboards", "directory to write the dashboards to (the default is the repository's infra/monitoring/dashboards, seen from tools/dashboards)")
	check := flag.Bool("check", false, "write nothing; exit 1 naming each file that is missing or differs from what would be written")
	flag.Parse()

	files, err := generate()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashboards:", err)
		os.Exit(1)
	}
	if !*check {
		if err := os.MkdirAll(*out, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "dashboards:", err)
			os.Exit(1)
		}
	}
	stale := false
	for _, f := range files {
		path := filepath.Join(*out, f.name)
		if *check {
			if disk, err := os.ReadFile(path); err != nil || !bytes.Equal(disk, f.data) {
				fmt.Fprintf(os.Stderr, "dashboards: %s is stale: run `go run .` in tools/dashboards\n", path)
				stale = true
			}
			continue
		}
		if err := os.WriteFile(path, f.data, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "dashboards:", err)
			os.Exit(1)
		}
	}
	if stale {
		os.Exit(1)
	}
}

type file struct {
	name string
	data []byte
}

// generate returns each dashboard's file, in a fixed order.
func generate() ([]file, error) {
	var files []file
	for _, b := range []struct {
		name string
		d    *dashboard.DashboardBuilder
	}{{"region.json", region()}, {"owner.json", owner()}} {
		d, err := b.d.Build()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b.name, err)
		}
		for i, p := range d.Panels { // stable ids, so that links to a panel keep working
			if p.Panel != nil {
				p.Panel.Id = cog.ToPtr(uint32(i + 1))
			}
		}
		data, err := json.MarshalIndent(d, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b.name, err)
		}
		files = append(files, file{b.name, append(data, '\n')})
	}
	return files, nil
}

// region is the on-call view of a region: the grant SLO, the load, etcd.
func region() *dashboard.DashboardBuilder {
	return board("lockplane-region", "Lockplane region", labelVar("cluster")).
		WithPanel(series("Grants per second", "Grants made per second, per cluster.", "reqps",
			q(`sum by (cluster) (rate(lockplane_grants_total{cluster=~"$cluster"}[5m]))`, "{{cluster}}"))).
		WithPanel(slo(series("Grant service time p99 (SLO 40 ms)", "99th percentile of Acquire-to-grant time less any wait for the key, against the 40 ms SLO (red line).", "s",
			q(`histogram_quantile(0.99, sum by (cluster, le) (rate(lockplane_grant_service_seconds_bucket{cluster=~"$cluster"}[5m])))`, "{{cluster}}")), 0.04)).
		WithPanel(series("Grant time p99 including waits", "99th percentile of Acquire-to-grant time, including time spent waiting for the holder to release.", "s",
			q(`histogram_quantile(0.99, sum by (cluster, le) (rate(lockplane_grant_seconds_bucket{cluster=~"$cluster"}[5m])))`, "{{cluster}}"))).
		WithPanel(series("Contention (attempts per grant)", "Grant transactions sent to etcd per grant made: 1 means no contention.", "none",
			q(`sum by (cluster) (rate(lockplane_grant_attempts_total{cluster=~"$cluster"}[5m])) / sum by (cluster) (rate(lockplane_grants_total{cluster=~"$cluster"}[5m]))`, "{{cluster}}"))).
		WithPanel(series("Live holds and sessions", "Holds and session leases live in each cluster, as etcd counts them (every arbiter reports the same count).", "short",
			q(`max by (cluster) (lockplane_holds{cluster=~"$cluster"})`, "holds {{cluster}}"),
			q(`max by (cluster) (lockplane_sessions{cluster=~"$cluster"})`, "sessions {{cluster}}"))).
		WithPanel(series("Renewals per second", "Lease renewals the cluster confirmed, and those no quorum confirmed, per second.", "reqps",
			q(`sum by (cluster) (rate(lockplane_renewals_total{cluster=~"$cluster"}[5m]))`, "renewed {{cluster}}"),
			q(`sum by (cluster) (rate(lockplane_renewals_failed_total{cluster=~"$cluster"}[5m]))`, "failed {{cluster}}"))).
		// rate drops __name__ (and fails on two reasons' series with equal
		// labels), so the reason is copied to a label before it, in a subquery.
		WithPanel(series("Refusals by reason", "Requests refused per second, by refusal reason.", "reqps",
			q(`sum by (reason) (rate(label_replace({__name__=~"lockplane_refusals_.+_total", cluster=~"$cluster"}, "reason", "$1", "__name__", "lockplane_refusals_(.+)_total")[5m:1m]))`, "{{reason}}"))).
		WithPanel(sealed()).
		WithPanel(series("etcd WAL fsync p99", "99th percentile of etcd's write-ahead-log fsync time, per etcd host.", "s",
			q(`histogram_quantile(0.99, sum by (cluster, host, le) (rate(etcd_disk_wal_fsync_duration_seconds_bucket{job="etcd", cluster=~"$cluster"}[5m])))`, "{{cluster}} {{host}}"))).
		WithPanel(series("etcd leader changes", "Leader changes etcd saw in the past hour.", "short",
			q(`sum by (cluster) (increase(etcd_server_leader_changes_seen_total{job="etcd", cluster=~"$cluster"}[1h]))`, "{{cluster}}"))).
		WithPanel(series("etcd database size against quota", "etcd's database size as a share of its backend quota; at 100% etcd refuses writes.", "percentunit",
			q(`max by (cluster) (etcd_mvcc_db_total_size_in_bytes{job="etcd", cluster=~"$cluster"} / etcd_server_quota_backend_bytes{job="etcd", cluster=~"$cluster"})`, "{{cluster}}"))).
		WithPanel(series("Audit lag", "How long the audit store has been missing its oldest missing revision.", "s",
			q(`max by (cluster) (lockplane_audit_lag_seconds{cluster=~"$cluster"})`, "{{cluster}}")))
}

// owner is a namespace owner's view: how their clients hold and wait.
func owner() *dashboard.DashboardBuilder {
	return board("lockplane-owner", "Lockplane namespace owner", labelVar("cluster"), labelVar("namespace")).
		WithPanel(series("Expiries without release", "Holds ended by session expiry rather than Release in the past hour: clients that stopped renewing.", "short",
			q(`sum by (namespace, class) (increase(lockplane_expiries_total{namespace=~"$namespace", cluster=~"$cluster"}[1h]))`, "{{namespace}} {{class}}"))).
		WithPanel(series("Hold time p99", "99th percentile of how long holds were held.", "s",
			q(`histogram_quantile(0.99, sum by (namespace, class, le) (rate(lockplane_hold_seconds_bucket{namespace=~"$namespace", cluster=~"$cluster"}[15m])))`, "{{namespace}} {{class}}"))).
		WithPanel(series("Wait time p99", "99th percentile of how long Acquires waited for the key to be released.", "s",
			q(`histogram_quantile(0.99, sum by (namespace, class, le) (rate(lockplane_wait_seconds_bucket{namespace=~"$namespace", cluster=~"$cluster"}[15m])))`, "{{namespace}} {{class}}"))).
		WithPanel(series("Grants per second by class", "Grants made per second, by namespace and class.", "reqps",
			q(`sum by (namespace, class) (rate(lockplane_grants_total{namespace=~"$namespace", cluster=~"$cluster"}[5m]))`, "{{namespace}} {{class}}"))).
		WithPanel(series("Force-releases", "Holds ended by a two-person force-release in the past day.", "short",
			q(`sum by (namespace, class) (increase(lockplane_force_releases_total{namespace=~"$namespace", cluster=~"$cluster"}[24h]))`, "{{namespace}} {{class}}")))
}

// datasource is the Prometheus that the datasource variable picks.
var datasource = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

// board is a dashboard with a Prometheus datasource variable and vars after it.
func board(uid, title string, vars ...cog.Builder[dashboard.VariableModel]) *dashboard.DashboardBuilder {
	b := dashboard.NewDashboardBuilder(title).
		Uid(uid).
		Tags([]string{"lockplane", "slo"}).
		Time("now-6h", "now").
		Refresh("1m").
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus"))
	for _, v := range vars {
		b.WithVariable(v)
	}
	return b
}

// labelVar is a multi-value variable over the values of a label of lockplane_grants_total.
func labelVar(label string) *dashboard.QueryVariableBuilder {
	query := fmt.Sprintf("label_values(lockplane_grants_total, %s)", label)
	return dashboard.NewQueryVariableBuilder(label).
		Label(label).
		Datasource(datasource).
		Query(dashboard.StringOrMap{String: &query}).
		Definition(query).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc).
		Multi(true).
		IncludeAll(true).
		AllValue(".*")
}

type query struct{ expr, legend string }

func q(expr, legend string) query { return query{expr, legend} }

// targets are the panel's Prometheus queries, with refIds A, B, ...
func targets(qs []query) []cog.Builder[variants.Dataquery] {
	var ts []cog.Builder[variants.Dataquery]
	for i, q := range qs {
		ts = append(ts, prometheus.NewDataqueryBuilder().
			RefId(string(rune('A'+i))).
			Datasource(datasource).
			Expr(q.expr).
			LegendFormat(q.legend))
	}
	return ts
}

// series is a half-width time series panel.
func series(title, description, unit string, qs ...query) *timeseries.PanelBuilder {
	return timeseries.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(datasource).
		Unit(unit).
		Min(0).
		Span(12).
		Height(8).
		// The SDK's defaults hide the legend and leave the tooltip mode empty.
		Legend(common.NewVizLegendOptionsBuilder().
			ShowLegend(true).
			DisplayMode(common.LegendDisplayModeList).
			Placement(common.LegendPlacementBottom)).
		Tooltip(common.NewVizTooltipOptionsBuilder().
			Mode(common.TooltipDisplayModeMulti).
			Sort(common.SortOrderDescending)).
		Targets(targets(qs))
}

// slo draws a red line at the panel's objective.
func slo(p *timeseries.PanelBuilder, objective float64) *timeseries.PanelBuilder {
	return p.
		Thresholds(dashboard.NewThresholdsConfigBuilder().
			Mode(dashboard.ThresholdsModeAbsolute).
			Steps([]dashboard.Threshold{{Color: "green"}, {Value: cog.ToPtr(objective), Color: "red"}})).
		ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeLine))
}

// sealed shows, per cluster, whether it is sealed (red) or granting (green).
func sealed() *stat.PanelBuilder {
	return stat.NewPanelBuilder().
		Title("Sealed clusters").
		Description("1 (red) while a cluster is sealed and grants nothing until two operators advance its epoch; 0 while it grants.").
		Datasource(datasource).
		Unit("none").
		Span(12).
		Height(8).
		ColorMode(common.BigValueColorModeBackground).
		GraphMode(common.BigValueGraphModeNone).
		Orientation(common.VizOrientationAuto).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"})).
		Thresholds(dashboard.NewThresholdsConfigBuilder().
			Mode(dashboard.ThresholdsModeAbsolute).
			Steps([]dashboard.Threshold{{Color: "green"}, {Value: cog.ToPtr(1.0), Color: "red"}})).
		Targets(targets([]query{q(`max by (cluster) (lockplane_cluster_sealed{cluster=~"$cluster"})`, "{{cluster}}")}))
}
