// Package procflags is the command lines of bin/arbiter and bin/etcd as
// typed values: the one place the tests, the gate and the benchmarks
// spell those binaries' flags, so a flag renamed is renamed here alone.
// It imports no test kit (nor testing), so the gate's and the
// benchmarks' own binaries can use it.
package procflags

import (
	"strconv"
	"strings"
	"time"
)

// Arbiter is a bin/arbiter command line (services/cmd/arbiter's flags).
// An empty field gives no flag, so the arbiter's default holds.
type Arbiter struct {
	// Listen is the gRPC address, MetricsListen the /metrics one.
	Listen, MetricsListen string
	// EtcdEndpoints are the coord cluster's client URLs.
	EtcdEndpoints []string
	// Shards are the entity shards, one --shard each, in this order.
	Shards []Shard
	// SPIFFESocket (with SPIFFEID) is the SPIRE Workload API to take the
	// identity from, instead of SVID files.
	SPIFFESocket, SPIFFEID string
	// SVIDCert, SVIDKey, Bundle and TrustDomain are the identity as files.
	SVIDCert, SVIDKey, Bundle, TrustDomain string
	// Policies is the policy set's directory.
	Policies string
	// OpTimeout bounds a call's etcd requests.
	OpTimeout time.Duration
	// AllowAnyWorkload opens authorization when there is no policy set.
	AllowAnyWorkload bool
	// EtcdWithoutAuth uses the clusters without etcd users, as test and
	// benchmark clusters run.
	EtcdWithoutAuth bool
	// Classes are lock classes NAME=TTL[:TIER[:PREFIX,...]], one --class
	// each, in this order.
	Classes []string
	// GroupCommit is the Txns in flight per cluster; 0 gives no flag, so
	// an arbiter told 0 (each request its own Txn) is told so by Extra.
	GroupCommit int
	// Extra are flags this type does not name, passed last and as given:
	// rare ones (--oidc-*, --region, ...) that one test alone sets.
	Extra []string
}

// Shard is one entity shard: its name and its cluster's client URLs.
type Shard struct {
	Name      string
	Endpoints []string
}

// Args is the command line, without the binary, in a fixed order.
func (a Arbiter) Args() []string {
	var l line
	l.str("--listen", a.Listen)
	l.str("--metrics-listen", a.MetricsListen)
	l.list("--etcd-endpoints", a.EtcdEndpoints)
	for _, s := range a.Shards {
		l.add("--shard", s.Name+"="+strings.Join(s.Endpoints, ","))
	}
	l.str("--spiffe-socket", a.SPIFFESocket)
	l.str("--spiffe-id", a.SPIFFEID)
	l.str("--svid-cert", a.SVIDCert)
	l.str("--svid-key", a.SVIDKey)
	l.str("--bundle", a.Bundle)
	l.str("--trust-domain", a.TrustDomain)
	l.str("--policies", a.Policies)
	if a.OpTimeout != 0 {
		l.add("--op-timeout", a.OpTimeout.String())
	}
	l.flag("--allow-any-workload", a.AllowAnyWorkload)
	l.flag("--etcd-without-auth", a.EtcdWithoutAuth)
	for _, c := range a.Classes {
		l.add("--class", c)
	}
	if a.GroupCommit != 0 {
		l.add("--group-commit", strconv.Itoa(a.GroupCommit))
	}
	return append(l, a.Extra...)
}

// LeaseCheckpoints are the feature gates that make etcd keep a lease's
// remaining TTL across a leader change, as services/internal/etcdembed
// does: without them each leader change restarts every lease's TTL, so a
// dead holder's lease can outlive it.
const LeaseCheckpoints = "LeaseCheckpoint=true,LeaseCheckpointPersist=true"

// Etcd is a bin/etcd member's command line (etcd 3.6's flags). An empty
// field gives no flag, so etcd's default holds.
type Etcd struct {
	// Name is the member's name, DataDir its data directory.
	Name, DataDir string
	// ListenClient is where it serves clients, AdvertiseClient where
	// clients are told to reach it: comma-separated URLs.
	ListenClient, AdvertiseClient string
	// ListenPeer and AdvertisePeer are the same for the other members.
	ListenPeer, AdvertisePeer string
	// InitialCluster is every member as NAME=PEER_URL.
	InitialCluster []string
	// Token is the initial cluster token, one per cluster: members with
	// different tokens refuse each other.
	Token string
	// State is the initial cluster state: "new" or "existing".
	State string
	// FeatureGates are comma-separated NAME=BOOL (LeaseCheckpoints).
	FeatureGates string
	// AutoCompactionMode ("periodic" or "revision") and
	// AutoCompactionRetention make etcd compact its history itself.
	AutoCompactionMode, AutoCompactionRetention string
	// LogLevel is the least level logged, LogOutputs where to (a path).
	LogLevel, LogOutputs string
	// Extra are flags this type does not name, passed last and as given.
	Extra []string
}

// Args is the command line, without the binary, in a fixed order.
func (e Etcd) Args() []string {
	var l line
	l.str("--name", e.Name)
	l.str("--data-dir", e.DataDir)
	l.str("--listen-client-urls", e.ListenClient)
	l.str("--advertise-client-urls", e.AdvertiseClient)
	l.str("--listen-peer-urls", e.ListenPeer)
	l.str("--initial-advertise-peer-urls", e.AdvertisePeer)
	l.list("--initial-cluster", e.InitialCluster)
	l.str("--initial-cluster-token", e.Token)
	l.str("--initial-cluster-state", e.State)
	l.str("--feature-gates", e.FeatureGates)
	l.str("--auto-compaction-mode", e.AutoCompactionMode)
	l.str("--auto-compaction-retention", e.AutoCompactionRetention)
	l.str("--log-level", e.LogLevel)
	l.str("--log-outputs", e.LogOutputs)
	return append(l, e.Extra...)
}

// line is a command line being written.
type line []string

func (l *line) add(name, v string) { *l = append(*l, name, v) }

func (l *line) str(name, v string) {
	if v != "" {
		l.add(name, v)
	}
}

func (l *line) list(name string, vs []string) {
	if len(vs) > 0 {
		l.add(name, strings.Join(vs, ","))
	}
}

func (l *line) flag(name string, on bool) {
	if on {
		*l = append(*l, name)
	}
}
