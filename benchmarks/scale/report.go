package main

// The report: a table for people, JSON (-json) for tools.

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/latency"
)

type report struct {
	Sessions        int     `json:"sessions"`
	Identities      int     `json:"identities"`
	Holds           int     `json:"holds"`
	Workers         int     `json:"worker_processes"`
	TTLSeconds      float64 `json:"ttl_seconds"`
	DurationSeconds float64 `json:"duration_seconds"`
	MeasuredSeconds float64 `json:"measured_seconds"`
	// ServicesInOneProcess: etcd and the arbiter share the driver's
	// process, so RSS and CPU of "services" are both together.
	ServicesInOneProcess bool `json:"services_in_one_process"`

	KeepalivesToEtcd float64 `json:"keepalives_to_etcd"`
	// KeepalivesByCluster is renewals per TTL by cluster: "coord" and
	// the shard apart when etcd runs as processes; one "coord+shard"
	// embedded, where one registry counts every cluster.
	KeepalivesByCluster        map[string]float64 `json:"keepalives_to_etcd_per_ttl_by_cluster"`
	KeepalivesPerTTL           float64            `json:"keepalives_to_etcd_per_ttl"`
	KeepalivesPerTTLPerSession float64            `json:"keepalives_to_etcd_per_ttl_per_session"`

	// KeepalivesPerRenewalPerSession divides by the client's renewals
	// per TTL (lockclient.RenewalsPerTTL): the etcd lease renewals one
	// client renewal costs, one per cluster the session has a lease on.
	KeepalivesPerRenewalPerSession float64 `json:"keepalives_to_etcd_per_renewal_per_session"`

	// FalseExpiries is the larger of FencedAtClients (holds whose client
	// saw them fenced while it renewed) and the holds taken but missing
	// from etcd at the end (Holds - HoldsInEtcd). It must be 0.
	FalseExpiries   int   `json:"false_expiries"`
	FencedAtClients int   `json:"fenced_at_clients"`
	HoldsInEtcd     int64 `json:"holds_in_etcd_at_end"`

	RSSBaselineBytes   int64   `json:"rss_baseline_bytes"`
	RSSSessionsBytes   int64   `json:"rss_with_sessions_bytes"`
	RSSHoldsBytes      int64   `json:"rss_with_holds_bytes"`
	RSSPerSessionBytes float64 `json:"rss_per_session_bytes"`
	RSSPerHoldBytes    float64 `json:"rss_per_hold_bytes"`

	ShardDBBytes      int64 `json:"shard_db_bytes"`
	ShardDBInUseBytes int64 `json:"shard_db_in_use_bytes"`
	CoordDBBytes      int64 `json:"coord_db_bytes"`
	CoordDBInUseBytes int64 `json:"coord_db_in_use_bytes"`

	Grant         latency.Summary `json:"grant"`
	GrantFailures int             `json:"grant_failures"`

	CPUServicesSeconds float64 `json:"cpu_services_seconds"`
	CPUCoresServices   float64 `json:"cpu_services_cores"`
	CPUEtcdSeconds     float64 `json:"cpu_etcd_seconds"`
	CPUWorkersSeconds  float64 `json:"cpu_workers_seconds"`
}

func (r *report) writeJSON(w io.Writer) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(r)
}

func (r *report) writeTable(w io.Writer) {
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	row := func(name, value, note string) { fmt.Fprintf(w, "%-34s %-22s %s\n", name, value, note) }
	fmt.Fprintf(w, "\n%d sessions across %d identities, %d holds on one 3-member entity shard, %d worker processes, TTL %.0fs, measured %.0fs\n\n",
		r.Sessions, r.Identities, r.Holds, r.Workers, r.TTLSeconds, r.MeasuredSeconds)
	row("keepalives reaching etcd / TTL", fmt.Sprintf("%.0f", r.KeepalivesPerTTL), fmt.Sprintf("%.2f per session per TTL, %.2f per session per client renewal (ADR-10: per session, not per hold)",
		r.KeepalivesPerTTLPerSession, r.KeepalivesPerRenewalPerSession))
	if len(r.KeepalivesByCluster) > 1 {
		for _, cluster := range slices.Sorted(maps.Keys(r.KeepalivesByCluster)) {
			n := r.KeepalivesByCluster[cluster]
			row("  of which "+cluster, fmt.Sprintf("%.0f", n), fmt.Sprintf("%.2f per session per client renewal (ADR-10's figure is per cluster: 1)",
				n/float64(r.Sessions+1)/lockclient.RenewalsPerTTL))
		}
	}
	if r.MeasuredSeconds < 3*r.TTLSeconds {
		row("", "", "(measured under 3 TTLs: renewals come in steps of TTL/3, so this is coarse)")
	}
	row("false expiries", fmt.Sprint(r.FalseExpiries), fmt.Sprintf("must be 0: %d fenced at clients, %d of %d holds in etcd at the end", r.FencedAtClients, r.HoldsInEtcd, r.Holds))
	where := "arbiter"
	if r.ServicesInOneProcess {
		where = "arbiter+etcd"
	}
	row("RSS per session ("+where+")", fmt.Sprintf("%.0f B", r.RSSPerSessionBytes), fmt.Sprintf("baseline %s, with sessions %s", mib(r.RSSBaselineBytes), mib(r.RSSSessionsBytes)))
	row("RSS per hold ("+where+")", fmt.Sprintf("%.0f B", r.RSSPerHoldBytes), fmt.Sprintf("with holds %s", mib(r.RSSHoldsBytes)))
	row("etcd db size, entity shard", mib(r.ShardDBBytes), fmt.Sprintf("%s in use (largest member)", mib(r.ShardDBInUseBytes)))
	row("etcd db size, coord", mib(r.CoordDBBytes), fmt.Sprintf("%s in use (largest member)", mib(r.CoordDBInUseBytes)))
	row("fresh grant p50 / p99", fmt.Sprintf("%.2f / %.2f ms", r.Grant.P50ms, r.Grant.P99ms), fmt.Sprintf("%d acquires, %d failed, max %.2f ms", r.Grant.N, r.GrantFailures, r.Grant.MaxMs))
	row("CPU, "+where, fmt.Sprintf("%.1f s", r.CPUServicesSeconds), fmt.Sprintf("%.2f cores over the measured window", r.CPUCoresServices))
	if !r.ServicesInOneProcess {
		row("CPU, etcd processes", fmt.Sprintf("%.1f s", r.CPUEtcdSeconds), "")
	}
	row("CPU, client workers", fmt.Sprintf("%.1f s", r.CPUWorkersSeconds), "")
}
