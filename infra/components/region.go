package components

import (
	"fmt"

	"github.com/lockplane/lockplane/infra/nodes"
	"github.com/lockplane/lockplane/infra/topology"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// Region is everything of one region: its halls and hosts, the Tang
// servers, the coord cluster and entity shards with etcd authentication on,
// the audit store and archive (when the stack has their hosts), and the
// arbiters.
type Region struct {
	pulumi.ResourceState
	Coord   *EtcdCluster
	Shards  []*EtcdCluster
	Arbiter *Arbiter
	// FanIn publishes the arbiters to clients with key affinity.
	FanIn *FanIn
	// Spire is nil without a spire host.
	Spire *Spire
	// Audit is nil when the stack runs no audit store, Archive when it
	// runs no audit archive.
	Audit    *AuditStore
	Archive  *Archive
	EtcdCA   *nodes.CA
	SpiffeCA *nodes.CA
	// EtcdUsers are the etcd users' passwords, the same on every cluster;
	// EtcdAuth the clusters' EtcdAuth resources, coord first.
	EtcdUsers *EtcdUsers
	EtcdAuth  []*nodes.EtcdAuth
	// Snapshots are the clusters' snapshot jobs, coord first; none when
	// the stack names no snapshot store.
	Snapshots []*SnapshotJob
	// Monitor is nil without a host of role monitor.
	Monitor *Monitor
}

// NewRegion builds a region from a validated stack and its plan.
func NewRegion(ctx *pulumi.Context, env *Env, opts ...pulumi.ResourceOption) (*Region, error) {
	s := env.Stack
	r := &Region{}
	if err := ctx.RegisterComponentResource("lockplane:infra:Region", s.Region, r, opts...); err != nil {
		return nil, err
	}
	in := pulumi.Parent(r)
	var err error
	// One CA for etcd's peer and client TLS, one for the SPIFFE trust
	// domain the arbiter and its clients authenticate in.
	if r.EtcdCA, err = nodes.NewCA(ctx, s.Region+"-etcd-ca", "Lockplane "+s.Region+" etcd CA", 10*365*24, nil, in); err != nil {
		return nil, err
	}
	if r.SpiffeCA, err = nodes.NewCA(ctx, s.Region+"-spiffe-ca", s.TrustDomain+" CA", 10*365*24, []string{"spiffe://" + s.TrustDomain}, in); err != nil {
		return nil, err
	}

	halls := map[string]*Hall{}
	for _, h := range s.Halls {
		if halls[h], err = NewHall(ctx, s.Region+"-"+h, h, in); err != nil {
			return nil, err
		}
	}

	var tang []*TangServer
	for _, h := range env.Plan.Tang {
		t, err := NewTangServer(ctx, env, h, pulumi.Parent(halls[h.Hall]))
		if err != nil {
			return nil, err
		}
		tang = append(tang, t)
	}

	// Every etcd host: the node binary, its disk encrypted and bound to
	// Tang, and its fsync benchmark, before any etcd is installed on it.
	etcdNodes := map[string]*Node{}
	for _, h := range s.Hosts {
		if !h.Has("coord") && !h.Has("entity") {
			continue
		}
		if etcdNodes[h.Name], err = NewNode(ctx, env, h, tang, pulumi.Parent(halls[h.Hall])); err != nil {
			return nil, err
		}
	}

	if r.Coord, err = NewEtcdCluster(ctx, env, EtcdClusterArgs{Name: "coord", Members: env.Plan.Coord, Nodes: etcdNodes, CA: r.EtcdCA}, in); err != nil {
		return nil, err
	}
	for i, members := range env.Plan.Shards {
		shard, err := NewEtcdCluster(ctx, env, EtcdClusterArgs{Name: fmt.Sprintf("entity-%d", i), Members: members, Nodes: etcdNodes, CA: r.EtcdCA}, in)
		if err != nil {
			return nil, err
		}
		r.Shards = append(r.Shards, shard)
	}

	// The etcd users' passwords: one set for every cluster of the region.
	if r.EtcdUsers, err = NewEtcdUsers(ctx, env, in); err != nil {
		return nil, err
	}

	// Every cluster's first epoch, allocated from the coord cluster, before
	// any arbiter serves: an arbiter never creates an epoch record (ADR-03).
	// The bootstrap signs in as root: on a new region authentication is
	// not on yet (and lets it in as no user); a shard added later reaches
	// a coord cluster where it is.
	coordEpoch, err := nodes.NewEtcdEpoch(ctx, s.Region+"-coord-epoch", nodes.EtcdEpochArgs{Cluster: "coord",
		CoordEndpoints: r.Coord.Endpoints, Endpoints: r.Coord.Endpoints, CA: r.EtcdCA, Client: r.Coord.Client,
		Above: s.Coord.EpochAbove, Root: r.EtcdUsers.Root, Restored: s.Restore.Enabled()}, in, pulumi.DependsOn([]pulumi.Resource{r.Coord}))
	if err != nil {
		return nil, err
	}
	epochs := []pulumi.Resource{coordEpoch}
	shardEpochs := map[string]pulumi.Resource{}
	for _, sh := range r.Shards {
		e, err := nodes.NewEtcdEpoch(ctx, s.Region+"-"+sh.Name+"-epoch", nodes.EtcdEpochArgs{Cluster: sh.Name,
			CoordEndpoints: r.Coord.Endpoints, Endpoints: sh.Endpoints, CA: r.EtcdCA, Client: r.Coord.Client, Root: r.EtcdUsers.Root,
			Restored: s.Restore.Enabled()},
			in, pulumi.DependsOn([]pulumi.Resource{coordEpoch, sh}))
		if err != nil {
			return nil, err
		}
		epochs = append(epochs, e)
		shardEpochs[sh.Name] = e
	}

	// etcd authentication on every cluster (ADR-20, docs/etcd-roles.md),
	// after its epoch bootstrap and before any arbiter starts. The coord
	// cluster's waits for every epoch: each bootstrap writes there, and
	// one that signed in before authentication came on would be refused
	// after.
	coordAuth, err := enableEtcdAuth(ctx, env, r.Coord, r.EtcdCA, r.EtcdUsers, epochs, in)
	if err != nil {
		return nil, err
	}
	r.EtcdAuth = append(r.EtcdAuth, coordAuth)
	for _, sh := range r.Shards {
		a, err := enableEtcdAuth(ctx, env, sh, r.EtcdCA, r.EtcdUsers, []pulumi.Resource{shardEpochs[sh.Name]}, in)
		if err != nil {
			return nil, err
		}
		r.EtcdAuth = append(r.EtcdAuth, a)
	}

	// Every cluster's snapshot job, on its own member hosts, once its
	// EtcdAuth has made the snapshot user (docs/dr.md).
	if s.Snapshots.Enabled() {
		if env.Store == nil {
			return nil, fmt.Errorf("snapshots.storeStack: %s was not read: the program gives the region its snapshot store", s.Snapshots.StoreStack)
		}
		members := append([][]topology.Member{env.Plan.Coord}, env.Plan.Shards...)
		for i, c := range append([]*EtcdCluster{r.Coord}, r.Shards...) {
			j, err := NewSnapshotJob(ctx, env, SnapshotJobArgs{Cluster: c, Members: members[i], Password: r.EtcdUsers.Snapshot[c.Name],
				Store: env.Store, After: []pulumi.Resource{r.EtcdAuth[i]}}, in)
			if err != nil {
				return nil, err
			}
			r.Snapshots = append(r.Snapshots, j)
		}
	}

	// The audit store lets in the arbiter hosts (host runtime) and the
	// stack's audit.networks.
	if h := env.Plan.Audit; h != nil {
		var clients []string
		for _, a := range env.Plan.Arbiters {
			clients = append(clients, a.Address)
		}
		clients = append(clients, s.Audit.Networks...)
		if r.Audit, err = NewAuditStore(ctx, env, AuditStoreArgs{Host: *h, Clients: clients}, pulumi.Parent(halls[h.Hall])); err != nil {
			return nil, err
		}
	}

	if h := env.Plan.Archive; h != nil {
		if r.Archive, err = NewArchive(ctx, env, ArchiveArgs{Host: *h}, pulumi.Parent(halls[h.Hall])); err != nil {
			return nil, err
		}
	}

	if env.Plan.Spire != nil {
		if r.Spire, err = NewSpire(ctx, env, SpireArgs{SpiffeCA: r.SpiffeCA, Halls: halls}, in); err != nil {
			return nil, err
		}
	}

	var auth []pulumi.Resource
	for _, a := range r.EtcdAuth {
		auth = append(auth, a)
	}
	if r.Arbiter, err = NewArbiter(ctx, env, ArbiterArgs{Coord: r.Coord, Shards: r.Shards, EtcdCA: r.EtcdCA, SpiffeCA: r.SpiffeCA, Halls: halls,
		Epochs: epochs, EtcdUsers: r.EtcdUsers, EtcdAuth: auth, Audit: r.Audit, Archive: r.Archive, Spire: r.Spire}, in); err != nil {
		return nil, err
	}
	if r.FanIn, err = NewFanIn(ctx, env, FanInArgs{Arbiter: r.Arbiter, SpiffeCA: r.SpiffeCA, Halls: halls}, in); err != nil {
		return nil, err
	}
	if h, ok := s.MonitorHost(); ok {
		if r.Monitor, err = NewMonitor(ctx, env, MonitorArgs{Host: h, Targets: MonitorTargets(env, env.Plan, h), Owners: env.Owners},
			pulumi.Parent(halls[h.Hall])); err != nil {
			return nil, err
		}
	}

	shardIDs := pulumi.StringArray{}
	for _, sh := range r.Shards {
		shardIDs = append(shardIDs, sh.ClusterID)
	}
	outputs := pulumi.Map{
		"coordClusterId":   r.Coord.ClusterID,
		"coordEndpoints":   pulumi.ToStringArray(r.Coord.Endpoints),
		"entityClusterIds": shardIDs,
		"arbiterEndpoints": pulumi.ToStringArray(r.Arbiter.Endpoints),
		"fanInEndpoints":   pulumi.ToStringArray(r.FanIn.Endpoints),
		"etcdCaCertPem":    r.EtcdCA.CertPem,
		"spiffeBundlePem":  r.SpiffeCA.CertPem,
	}
	if r.Audit != nil {
		outputs["auditStoreUrl"] = pulumi.String(r.Audit.URL)
	}
	if r.Archive != nil {
		outputs["archiveUrl"] = pulumi.String(r.Archive.URL)
	}
	if r.Monitor != nil {
		outputs["prometheusUrl"], outputs["alertmanagerUrl"] = pulumi.String(r.Monitor.PrometheusURL), pulumi.String(r.Monitor.AlertmanagerURL)
	}
	return r, ctx.RegisterResourceOutputs(r, outputs)
}

// Hall groups the hosts of one hall.
type Hall struct {
	pulumi.ResourceState
	Name string
}

// NewHall registers a hall.
func NewHall(ctx *pulumi.Context, name, hall string, opts ...pulumi.ResourceOption) (*Hall, error) {
	h := &Hall{Name: hall}
	if err := ctx.RegisterComponentResource("lockplane:infra:Hall", name, h, opts...); err != nil {
		return nil, err
	}
	return h, ctx.RegisterResourceOutputs(h, pulumi.Map{"hall": pulumi.String(hall)})
}
