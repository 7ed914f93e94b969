package components

import (
	"fmt"

	"github.com/lockplane/lockplane/infra/nodes"
	"github.com/lockplane/lockplane/infra/topology"
	"github.com/lockplane/lockplane/services/etcdauth"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// StoreAccess is how a region reaches its snapshot store, read from the
// snapshot store's stack: each cluster's storer and signing key, the only snapshot store
// user and key that cluster's snapshot jobs are given, the clusters'
// public keys, which every restore verifies by, and its restorer, the
// only user a restore reads as.
type StoreAccess struct {
	Stack     string
	URL       string
	CACertPem pulumi.StringInput
	// Restorer is the region's; its password secret.
	Restorer         string
	RestorerPassword pulumi.StringInput
	// Clusters are by cluster name: every cluster of the region.
	Clusters map[string]StoreClusterAccess
}

// StoreClusterAccess is one cluster's part of the snapshot store: its storer
// (confined to the cluster's prefix) and signing key, both secret, and
// the public keys its snapshots are verified by.
type StoreClusterAccess struct {
	Storer                     string
	StorerPassword, SigningKey pulumi.StringInput
	PublicKeys                 []string
}

// Trusted are cluster's snapshot signing public keys (none for a cluster
// the snapshot store does not know, which a restore then refuses).
func (v *StoreAccess) Trusted(cluster string) []string { return v.Clusters[cluster].PublicKeys }

// SnapshotJob is one cluster's snapshot job (docs/dr.md): an instance on
// every member host, which elect one on the cluster itself; the leader
// snapshots its member on the stack's schedule into the snapshot store. It signs
// in as etcd's snapshot user (root role: etcd serves snapshots to no
// other), so it runs on the cluster's own hosts and nowhere else.
type SnapshotJob struct {
	pulumi.ResourceState
	Services []*nodes.Service
}

// SnapshotJobArgs place a cluster's job.
type SnapshotJobArgs struct {
	Cluster *EtcdCluster
	Members []topology.Member
	// Password is the snapshot user's.
	Password pulumi.StringInput
	Store    *StoreAccess
	// After are the steps the job waits for: the cluster's EtcdAuth,
	// which makes the snapshot user.
	After []pulumi.Resource
}

// SnapshotFiles are an instance's files on its member host.
type SnapshotFiles struct{ Bin, EtcdCredentials, StoreCA, StoreCredentials, SigningKey, Dir string }

// SnapshotCommand is an instance's command line: its member over TLS with
// the member's own certificate, the snapshot user's and the cluster's
// snapshot store credentials and signing key by file.
func SnapshotCommand(s *topology.Stack, cluster string, m topology.Member, etcd EtcdFiles, f SnapshotFiles, storeURL string) []string {
	return []string{f.Bin, "--region", s.Region, "--cluster", cluster, "--name", m.Name,
		"--endpoint", fmt.Sprintf("https://%s:%d", m.Host.Address, s.Etcd.ClientPort),
		"--etcd-ca", etcd.CA, "--etcd-cert", etcd.Cert, "--etcd-key", etcd.Key, "--etcd-credentials", f.EtcdCredentials,
		"--store", storeURL, "--store-ca", f.StoreCA, "--store-credentials", f.StoreCredentials,
		"--signing-key", f.SigningKey, "--dir", f.Dir, "--every", s.Snapshots.Every,
		"--metrics", fmt.Sprintf("%s:%d", m.Host.Address, s.Snapshots.MetricsPort)}
}

// NewSnapshotJob installs and starts the job on every member host.
func NewSnapshotJob(ctx *pulumi.Context, env *Env, a SnapshotJobArgs, opts ...pulumi.ResourceOption) (*SnapshotJob, error) {
	s := env.Stack
	name := s.Region + "-" + a.Cluster.Name + "-snapshots"
	j := &SnapshotJob{}
	if err := ctx.RegisterComponentResource("lockplane:infra:SnapshotJob", name, j, opts...); err != nil {
		return nil, err
	}
	in := pulumi.Parent(j)
	etcdCreds := pulumi.ToSecret(a.Password.ToStringOutput().ApplyT(func(p string) string {
		return fmt.Sprintf("snapshot %s:%s\n", etcdauth.Snapshotter, p)
	})).(pulumi.StringOutput)
	// The cluster's own storer and key only: a host of one cluster can
	// neither write nor sign another's snapshots.
	own, ok := a.Store.Clusters[a.Cluster.Name]
	if !ok || own.Storer == "" || own.StorerPassword == nil || own.SigningKey == nil {
		return nil, fmt.Errorf("snapshots.storeStack: %s has no storer or signing key for cluster %s", a.Store.Stack, a.Cluster.Name)
	}
	storeCreds := pulumi.ToSecret(own.StorerPassword.ToStringOutput().ApplyT(func(p string) string {
		return fmt.Sprintf("vault %s:%s\n", own.Storer, p)
	})).(pulumi.StringOutput)
	signingKey := pulumi.ToSecret(own.SigningKey).(pulumi.StringOutput)
	for _, m := range a.Members {
		h := m.Host
		conn := env.Connection(h)
		mname := name + "-" + m.Name
		f := SnapshotFiles{Bin: env.BinPath(h, "lockplane-snapshot"), EtcdCredentials: env.ConfPath(h, a.Cluster.Name+"/snapshot-etcd-credentials"),
			StoreCA: env.ConfPath(h, a.Cluster.Name+"/vault-ca.crt"), StoreCredentials: env.ConfPath(h, a.Cluster.Name+"/snapshot-vault-credentials"),
			SigningKey: env.ConfPath(h, a.Cluster.Name+"/snapshot-signing-key.pem"), Dir: h.HostPath("/var/lib/lockplane/snapshots/" + a.Cluster.Name)}
		deps, triggers, err := putConfig(ctx, conn, mname, []configFile{
			{f.EtcdCredentials, etcdCreds, "0600"}, {f.StoreCA, a.Store.CACertPem, "0644"}, {f.StoreCredentials, storeCreds, "0600"},
			{f.SigningKey, signingKey, "0600"},
		}, in)
		if err != nil {
			return nil, err
		}
		bin, err := nodes.NewFile(ctx, mname+"-bin", nodes.FileArgs{Connection: conn, Path: f.Bin, Source: env.Snapshot.Path,
			SourceSha256: env.Snapshot.Sha256, Mode: "0755"}, in)
		if err != nil {
			return nil, err
		}
		deps = append(append(deps, bin), a.After...)
		triggers = append(triggers, bin.Sha256)
		svc, err := nodes.NewService(ctx, mname+"-service", nodes.ServiceArgs{Connection: conn, Name: "lockplane-snapshot-" + a.Cluster.Name,
			Mode: s.SSH.ServiceMode, StateDir: env.StateDir(h),
			Command:  pulumi.ToStringArray(SnapshotCommand(s, a.Cluster.Name, m, etcdFiles(env, h, a.Cluster.Name), f, a.Store.URL)),
			Triggers: triggers}, in, pulumi.DependsOn(deps))
		if err != nil {
			return nil, err
		}
		j.Services = append(j.Services, svc)
	}
	return j, ctx.RegisterResourceOutputs(j, pulumi.Map{"cluster": pulumi.String(a.Cluster.Name), "store": pulumi.String(a.Store.URL)})
}
