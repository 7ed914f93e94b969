package components

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/lockplane/lockplane/infra/nodes"
	"github.com/lockplane/lockplane/infra/topology"
	"github.com/lockplane/lockplane/services/etcdauth"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

func itoa(i int) string { return strconv.Itoa(i) }

// EtcdCluster is one etcd cluster of the region: the coord cluster or an
// entity shard, TLS on every URL.
type EtcdCluster struct {
	pulumi.ResourceState
	Name      string
	Endpoints []string
	Members   []*EtcdMember
	ClusterID pulumi.StringOutput
	// Client is the certificate the deployer checks the cluster with.
	Client *nodes.Certificate
	// Snapshot, in a DR stack, is the snapshot every member was restored
	// from; nil for a cluster made empty.
	Snapshot *nodes.StoreSnapshot
	// InPlace, for a shard the stack restores in place, is that restore.
	InPlace *nodes.ShardRestore
}

// EtcdClusterArgs places a cluster.
type EtcdClusterArgs struct {
	Name    string
	Members []topology.Member
	Nodes   map[string]*Node
	CA      *nodes.CA
	// Token is the cluster's initial-cluster-token and TokenKey the key
	// pair its members sign auth tokens with (set by NewEtcdCluster).
	Token    pulumi.StringInput
	TokenKey *nodes.EtcdAuthTokenKey
	// Snapshot, in a DR stack, is what every member restores before it
	// first starts (set by NewEtcdCluster).
	Snapshot *nodes.StoreSnapshot
	// InPlace is the shard's restore in place, which restarts every
	// member (set by NewEtcdCluster).
	InPlace *nodes.ShardRestore
}

// EtcdFlags is the command line of member m of a cluster, from the
// stack's tuning. Every URL is https, and peers and clients must present
// certificates from the region's etcd CA. Auth tokens are JWTs signed
// with the cluster's key (EtcdAuthToken).
func EtcdFlags(s *topology.Stack, cluster string, token pulumi.StringInput, members []topology.Member, m topology.Member, files EtcdFiles) pulumi.StringArray {
	var initial []string
	for _, o := range members {
		initial = append(initial, fmt.Sprintf("%s=https://%s:%d", o.Name, o.Host.Address, s.Etcd.PeerPort))
	}
	client := fmt.Sprintf("https://%s:%d", m.Host.Address, s.Etcd.ClientPort)
	peer := fmt.Sprintf("https://%s:%d", m.Host.Address, s.Etcd.PeerPort)
	before := []string{
		"--name", m.Name,
		"--data-dir", EtcdDataDir(m, cluster),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", strings.Join(initial, ","),
		"--initial-cluster-state", "new",
		"--cert-file", files.Cert, "--key-file", files.Key, "--trusted-ca-file", files.CA, "--client-cert-auth",
		"--peer-cert-file", files.Cert, "--peer-key-file", files.Key, "--peer-trusted-ca-file", files.CA, "--peer-client-cert-auth",
		"--heartbeat-interval", itoa(s.Etcd.HeartbeatMs), "--election-timeout", itoa(s.Etcd.ElectionMs),
		"--quota-backend-bytes", strconv.FormatInt(s.Etcd.QuotaBytes, 10),
		"--auto-compaction-mode", "periodic", "--auto-compaction-retention", s.Etcd.CompactionPeriod,
		"--snapshot-count", itoa(s.Etcd.SnapshotCount),
		"--feature-gates", "LeaseCheckpoint=true,LeaseCheckpointPersist=true",
		"--listen-metrics-urls", fmt.Sprintf("http://%s:%d", m.Host.Address, s.Etcd.MetricsPort()),
		"--logger", "zap", "--log-level", "info",
		"--auth-token", EtcdAuthToken(files),
		"--initial-cluster-token",
	}
	return append(pulumi.ToStringArray(before), token)
}

// EtcdFiles are a member's TLS files on its host, and its cluster's auth
// token key pair.
type EtcdFiles struct{ Cert, Key, CA, TokenKey, TokenPublicKey string }

// EtcdDataDir is member m's --data-dir, on its data disk.
func EtcdDataDir(m topology.Member, cluster string) string {
	return m.Host.HostPath(m.Host.DataDisk + "/etcd-" + cluster)
}

// etcdFiles are where a member of cluster puts its files on h.
func etcdFiles(env *Env, h topology.Host, cluster string) EtcdFiles {
	return EtcdFiles{Cert: env.ConfPath(h, cluster+"/tls.crt"), Key: env.ConfPath(h, cluster+"/tls.key"), CA: env.ConfPath(h, cluster+"/ca.crt"),
		TokenKey: env.ConfPath(h, cluster+"/auth-token.key"), TokenPublicKey: env.ConfPath(h, cluster+"/auth-token.pub")}
}

// EtcdAuthToken is a member's --auth-token: JWTs signed with its cluster's
// key, valid 10 minutes (etcdauth.AuthTokenFlag: HS256, the private key
// file's bytes as the HMAC key; the public half is not used). etcd's default "simple" tokens
// carry the Raft index they were issued at, and a member waits for its
// own index to reach it before it answers, so a client signed in before
// the cluster was rebuilt or restored (indexes from 1 again) would hang on
// every call until its deadline. A signed token is checked at once by any
// member holding the key, whatever its index; an expired one is refused
// and the client signs in again.
func EtcdAuthToken(f EtcdFiles) string {
	return etcdauth.AuthTokenFlag(f.TokenKey, etcdauth.TokenTTL)
}

// NewEtcdCluster installs and starts every member, then waits for the
// cluster to form.
func NewEtcdCluster(ctx *pulumi.Context, env *Env, a EtcdClusterArgs, opts ...pulumi.ResourceOption) (*EtcdCluster, error) {
	s := env.Stack
	c := &EtcdCluster{Name: a.Name}
	if err := ctx.RegisterComponentResource("lockplane:infra:EtcdCluster", s.Region+"-"+a.Name, c, opts...); err != nil {
		return nil, err
	}
	in := pulumi.Parent(c)
	var started []pulumi.Resource
	tok, err := nodes.NewClusterToken(ctx, s.Region+"-"+a.Name+"-token", s.Region+"-"+a.Name, in)
	if err != nil {
		return nil, err
	}
	a.Token = tok.Token
	if a.TokenKey, err = nodes.NewEtcdAuthTokenKey(ctx, s.Region+"-"+a.Name+"-auth-token-key", s.Region+"-"+a.Name, in); err != nil {
		return nil, err
	}
	for _, m := range a.Members {
		c.Endpoints = append(c.Endpoints, fmt.Sprintf("https://%s:%d", m.Host.Address, s.Etcd.ClientPort))
	}
	// A DR stack's cluster comes back from one snapshot, chosen once for
	// all its members (docs/dr.md).
	if s.Restore.Enabled() {
		from := s.Restore.From
		if obj := s.Restore.Objects[a.Name]; obj != "" {
			from = obj
		}
		v := env.RestoreStore
		if c.Snapshot, err = nodes.NewStoreSnapshot(ctx, s.Region+"-"+a.Name+"-snapshot", nodes.SnapshotStore{URL: v.URL, CACertPem: v.CACertPem,
			AccessKey: pulumi.String(v.Restorer), SecretKey: v.RestorerPassword, Region: s.Region, Cluster: a.Name,
			TrustedKeys: v.Trusted(a.Name)}, from, in); err != nil {
			return nil, err
		}
		a.Snapshot = c.Snapshot
	}
	if c.Client, err = nodes.NewCertificate(ctx, s.Region+"-"+a.Name+"-deployer", nodes.CertificateArgs{CA: a.CA,
		CommonName: "lockplane-deployer", Client: true, ValidityHours: 365 * 24}, in); err != nil {
		return nil, err
	}
	if from, ok := s.RestoreInPlace[a.Name]; ok {
		if c.InPlace, err = restoreInPlace(ctx, env, a, c, from, in); err != nil {
			return nil, err
		}
		a.InPlace = c.InPlace
	}
	for _, m := range a.Members {
		mem, err := NewEtcdMember(ctx, env, a, m, in)
		if err != nil {
			return nil, err
		}
		c.Members = append(c.Members, mem)
		started = append(started, mem.Service)
	}
	formed := nodes.EtcdClusterArgs{Endpoints: c.Endpoints, CA: a.CA, Client: c.Client, Members: len(a.Members)}
	if c.InPlace != nil {
		formed.ExpectClusterID = c.InPlace.ClusterID
	}
	ready, err := nodes.NewEtcdCluster(ctx, s.Region+"-"+a.Name+"-formed", formed, in, pulumi.DependsOn(started))
	if err != nil {
		return nil, err
	}
	c.ClusterID = ready.ClusterID
	return c, ctx.RegisterResourceOutputs(c, pulumi.Map{"endpoints": pulumi.ToStringArray(c.Endpoints), "clusterId": ready.ClusterID,
		"memberIds": ready.MemberIDs})
}

// InPlaceRevisionBump is how far above a shard's head (read before its
// members stop) a restore in place starts its revisions: the margin for
// what the shard writes until it stops, and the whole bump when no member
// answers. A billion is etcd's usual choice for a restore's bump; a
// token carries revisions up to 2^48, some 280,000 such bumps.
const InPlaceRevisionBump = 1_000_000_000

// restoreInPlace restores a running shard from the region's snapshot store, as
// the region's restorer: one snapshot chosen once ("latest" or a name),
// every member stopped and its data dir replaced (docs/dr.md). The
// members' services restart after it, and the shard serves sealed.
func restoreInPlace(ctx *pulumi.Context, env *Env, a EtcdClusterArgs, c *EtcdCluster, from string, opts ...pulumi.ResourceOption) (*nodes.ShardRestore, error) {
	s, v := env.Stack, env.Store
	if v == nil {
		return nil, fmt.Errorf("restoreInPlace.%s: the region has no snapshot store (snapshots.storeStack)", a.Name)
	}
	store := nodes.SnapshotStore{URL: v.URL, CACertPem: v.CACertPem, AccessKey: pulumi.String(v.Restorer), SecretKey: v.RestorerPassword,
		Region: s.Region, Cluster: a.Name, TrustedKeys: v.Trusted(a.Name)}
	snap, err := nodes.NewStoreSnapshot(ctx, s.Region+"-"+a.Name+"-in-place-snapshot", store, from, opts...)
	if err != nil {
		return nil, err
	}
	var members []nodes.ShardMember
	var gates []pulumi.Resource
	for _, m := range a.Members {
		h := m.Host
		members = append(members, nodes.ShardMember{Connection: env.Connection(h), Name: m.Name,
			PeerURL: fmt.Sprintf("https://%s:%d", h.Address, s.Etcd.PeerPort), DataDir: EtcdDataDir(m, a.Name),
			Service: "etcd-" + a.Name, Mode: s.SSH.ServiceMode, StateDir: env.StateDir(h)})
		gates = append(gates, a.Nodes[h.Name].Fsync)
	}
	return nodes.NewShardRestore(ctx, s.Region+"-"+a.Name+"-in-place-restore", nodes.ShardRestoreArgs{Store: store, Snapshot: snap, Members: members,
		Endpoints: c.Endpoints, CA: a.CA, Client: c.Client, RevisionBump: InPlaceRevisionBump}, append(opts, pulumi.DependsOn(gates))...)
}

// EtcdMember is one member on its dedicated host.
type EtcdMember struct {
	pulumi.ResourceState
	Service *nodes.Service
}

// NewEtcdMember installs etcd and the member's certificates on its host
// and starts it, only after the host's fsync benchmark passed the gate.
func NewEtcdMember(ctx *pulumi.Context, env *Env, a EtcdClusterArgs, m topology.Member, opts ...pulumi.ResourceOption) (*EtcdMember, error) {
	s := env.Stack
	name := s.Region + "-" + a.Name + "-" + m.Name
	mem := &EtcdMember{}
	if err := ctx.RegisterComponentResource("lockplane:infra:EtcdMember", name, mem, opts...); err != nil {
		return nil, err
	}
	in := pulumi.Parent(mem)
	h := m.Host
	conn := env.Connection(h)
	node := a.Nodes[h.Name]
	gated := pulumi.DependsOn([]pulumi.Resource{node.Fsync})
	cert, err := nodes.NewCertificate(ctx, name+"-tls", nodes.CertificateArgs{CA: a.CA, CommonName: m.Name,
		IPs: []string{h.Address}, DNSNames: []string{h.Name}, Server: true, Client: true, ValidityHours: 2 * 365 * 24}, in)
	if err != nil {
		return nil, err
	}
	files := etcdFiles(env, h, a.Name)
	// The auth token key pair is the cluster's: the same on every member,
	// both halves readable by etcd's user only.
	deps, triggers, err := putConfig(ctx, conn, name, []configFile{
		{files.Cert, cert.CertPem, "0644"}, {files.Key, cert.KeyPem, "0600"}, {files.CA, a.CA.CertPem, "0644"},
		{files.TokenKey, a.TokenKey.PrivateKeyPem, "0600"}, {files.TokenPublicKey, a.TokenKey.PublicKeyPem, "0600"},
	}, in, gated)
	if err != nil {
		return nil, err
	}
	bin, err := nodes.NewFile(ctx, name+"-etcd", nodes.FileArgs{Connection: conn, Path: env.BinPath(h, "etcd"),
		Source: env.Etcd.Path, SourceSha256: env.Etcd.Sha256, Mode: "0755"}, in, gated)
	if err != nil {
		return nil, err
	}
	deps = append(deps, bin)
	triggers = append(triggers, bin.Sha256)
	// In a DR stack the member's data dir is restored before etcd first
	// starts on it, as a member of a new cluster (the same token and peer
	// URLs its flags name), so the restored cluster is sealed.
	if a.Snapshot != nil {
		v := env.RestoreStore
		members := map[string]string{}
		for _, o := range a.Members {
			members[o.Name] = fmt.Sprintf("https://%s:%d", o.Host.Address, s.Etcd.PeerPort)
		}
		r, err := nodes.NewEtcdRestore(ctx, name+"-restore", nodes.EtcdRestoreArgs{Connection: conn, DataDir: EtcdDataDir(m, a.Name),
			Store: nodes.SnapshotStore{URL: v.URL, CACertPem: v.CACertPem, AccessKey: pulumi.String(v.Restorer), SecretKey: v.RestorerPassword,
				Region: s.Region, Cluster: a.Name, TrustedKeys: v.Trusted(a.Name)}, Snapshot: a.Snapshot, MemberName: m.Name, Members: members, Token: a.Token}, in, gated)
		if err != nil {
			return nil, err
		}
		deps = append(deps, r)
	}
	// A restore in place stops every member; the new restoredAt restarts
	// each on its restored data dir.
	if a.InPlace != nil {
		deps = append(deps, a.InPlace)
		triggers = append(triggers, a.InPlace.RestoredAt)
	}
	if mem.Service, err = nodes.NewService(ctx, name+"-service", nodes.ServiceArgs{Connection: conn, Name: "etcd-" + a.Name,
		Mode: s.SSH.ServiceMode, StateDir: env.StateDir(h), Command: append(pulumi.StringArray{pulumi.String(env.BinPath(h, "etcd"))}, EtcdFlags(s, a.Name, a.Token, a.Members, m, files)...),
		Triggers: triggers, Ready: EtcdReady(env, h, files)}, in, pulumi.DependsOn(deps)); err != nil {
		return nil, err
	}
	return mem, ctx.RegisterResourceOutputs(mem, pulumi.Map{"host": pulumi.String(h.Name), "address": pulumi.String(h.Address),
		"answered": mem.Service.Answered})
}
