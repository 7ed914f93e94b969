// Package nodes is the Go side of the lockplane resource provider
// (nodes/provider): one typed resource per kind, registered as
// lockplane:nodes:<Kind>. Inputs are plain Go values or Pulumi inputs;
// outputs are the provider's.
package nodes

import (
	"fmt"
	"sync"

	"github.com/lockplane/lockplane/nodes/remote"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

const prefix_ = "lockplane:nodes:"

// Connection reaches one host. Its private key is kept secret.
type Connection struct {
	remote.Target
}

// Input is the connection as a resource input.
func (c Connection) Input() pulumi.Map {
	m := pulumi.Map{
		"host":       pulumi.String(c.Host),
		"user":       pulumi.String(c.User),
		"privateKey": pulumi.ToSecret(pulumi.String(c.PrivateKey)),
	}
	if c.Port != 0 {
		m["port"] = pulumi.Int(c.Port)
	}
	if c.HostKey != "" {
		m["hostKey"] = pulumi.String(c.HostKey)
	}
	if c.TrustOnFirstUse {
		m["trustOnFirstUse"] = pulumi.Bool(true)
	}
	return m
}

func strings(list []string) pulumi.StringArray {
	out := pulumi.StringArray{}
	for _, s := range list {
		out = append(out, pulumi.String(s))
	}
	return out
}

// File is a file on a host.
type File struct {
	pulumi.CustomResourceState
	Path   pulumi.StringOutput `pulumi:"path"`
	Sha256 pulumi.StringOutput `pulumi:"sha256"`
}

// FileArgs: exactly one of Content and Source; Source needs SourceSha256.
type FileArgs struct {
	Connection   Connection
	Path         string
	Content      pulumi.StringInput
	Source       string
	SourceSha256 string
	Mode         string
}

// NewFile puts a file on a host.
func NewFile(ctx *pulumi.Context, name string, a FileArgs, opts ...pulumi.ResourceOption) (*File, error) {
	props := pulumi.Map{"connection": a.Connection.Input(), "path": pulumi.String(a.Path)}
	if a.Content != nil {
		props["content"] = a.Content
	} else {
		props["source"], props["sourceSha256"] = pulumi.String(a.Source), pulumi.String(a.SourceSha256)
	}
	if a.Mode != "" {
		props["mode"] = pulumi.String(a.Mode)
	}
	var r File
	return &r, ctx.RegisterResource(prefix_+"File", name, props, &r, opts...)
}

// ClusterToken is a new etcd cluster's random initial-cluster-token.
type ClusterToken struct {
	pulumi.CustomResourceState
	Token pulumi.StringOutput `pulumi:"token"`
}

// NewClusterToken makes a token starting with prefix.
func NewClusterToken(ctx *pulumi.Context, name, prefix string, opts ...pulumi.ResourceOption) (*ClusterToken, error) {
	var r ClusterToken
	return &r, ctx.RegisterResource(prefix_+"ClusterToken", name, pulumi.Map{"prefix": pulumi.String(prefix)}, &r, opts...)
}

// Password is a random password, secret in the state and in the program.
type Password struct {
	pulumi.CustomResourceState
	Password pulumi.StringOutput `pulumi:"password"`
}

// SnapshotSigningKey is one cluster's snapshot signing key, made once in
// the store stack: PrivateKeyPem (secret) for its snapshot jobs only,
// PublicKey (text form) for every restore to verify by.
type SnapshotSigningKey struct {
	pulumi.CustomResourceState
	PrivateKeyPem pulumi.StringOutput `pulumi:"privateKeyPem"`
	PublicKey     pulumi.StringOutput `pulumi:"publicKey"`
	KeyID         pulumi.StringOutput `pulumi:"keyId"`
}

// NewSnapshotSigningKey makes region's cluster's signing key once.
func NewSnapshotSigningKey(ctx *pulumi.Context, name, region, cluster string, opts ...pulumi.ResourceOption) (*SnapshotSigningKey, error) {
	var r SnapshotSigningKey
	return &r, ctx.RegisterResource(prefix_+"SnapshotSigningKey", name, pulumi.Map{"region": pulumi.String(region), "cluster": pulumi.String(cluster)}, &r,
		append(opts, pulumi.AdditionalSecretOutputs([]string{"privateKeyPem"}))...)
}

// NewPassword makes a password once; purpose names it.
func NewPassword(ctx *pulumi.Context, name, purpose string, opts ...pulumi.ResourceOption) (*Password, error) {
	var r Password
	return &r, ctx.RegisterResource(prefix_+"Password", name, pulumi.Map{"purpose": pulumi.String(purpose)}, &r,
		append(opts, pulumi.AdditionalSecretOutputs([]string{"password"}))...)
}

// Service is a long-running process on a host.
type Service struct {
	pulumi.CustomResourceState
	Pid     pulumi.IntOutput    `pulumi:"pid"`
	LogFile pulumi.StringOutput `pulumi:"logFile"`
	// Answered is the last line its readiness check printed (the address
	// that answered); empty without one.
	Answered pulumi.StringOutput `pulumi:"answered"`
}

// ReadyCheck is a command run on the service's host after each start
// until it exits 0 twice for the same start, within TimeoutSeconds (the
// provider's default when 0): the Service is made only once it passes.
// UpdateCommand, when set, replaces Command after a restart; Listens
// (IP:port) must be listened on by the service's own processes only.
type ReadyCheck struct {
	Command        []string
	UpdateCommand  []string
	Listens        []string
	TimeoutSeconds int
}

// ServiceArgs describes a service.
type ServiceArgs struct {
	Connection Connection
	Name       string
	Mode       string
	Command    pulumi.StringArrayInput
	Env        map[string]string
	StateDir   string
	// Triggers restart the service when they change.
	Triggers pulumi.StringArrayInput
	// Ready, when set, is the service's readiness check.
	Ready *ReadyCheck
}

// NewService runs a service on a host. Two Services of one program with
// the same name on the same host are refused: they would share a pid file
// (or unit), and each one's start would stop the other.
func NewService(ctx *pulumi.Context, name string, a ServiceArgs, opts ...pulumi.ResourceOption) (*Service, error) {
	if err := claimService(ctx, a.Connection.Host, a.Name, name); err != nil {
		return nil, err
	}
	props := pulumi.Map{"connection": a.Connection.Input(), "name": pulumi.String(a.Name), "mode": pulumi.String(a.Mode),
		"command": a.Command}
	if a.StateDir != "" {
		props["stateDir"] = pulumi.String(a.StateDir)
	}
	if len(a.Env) > 0 {
		props["env"] = pulumi.ToStringMap(a.Env)
	}
	if a.Triggers != nil {
		props["triggers"] = a.Triggers
	}
	if a.Ready != nil {
		ready := pulumi.Map{"command": strings(a.Ready.Command)}
		if a.Ready.TimeoutSeconds != 0 {
			ready["timeoutSeconds"] = pulumi.Int(a.Ready.TimeoutSeconds)
		}
		if a.Ready.UpdateCommand != nil {
			ready["updateCommand"] = strings(a.Ready.UpdateCommand)
		}
		if len(a.Ready.Listens) > 0 {
			ready["listens"] = strings(a.Ready.Listens)
		}
		props["ready"] = ready
	}
	var r Service
	return &r, ctx.RegisterResource(prefix_+"Service", name, props, &r, opts...)
}

// CA is a private certificate authority.
type CA struct {
	pulumi.CustomResourceState
	CertPem pulumi.StringOutput `pulumi:"certPem"`
	KeyPem  pulumi.StringOutput `pulumi:"keyPem"`
}

// NewCA makes a CA.
func NewCA(ctx *pulumi.Context, name, commonName string, validityHours int, uris []string, opts ...pulumi.ResourceOption) (*CA, error) {
	props := pulumi.Map{"commonName": pulumi.String(commonName), "validityHours": pulumi.Int(validityHours)}
	if len(uris) > 0 {
		props["uris"] = strings(uris)
	}
	var r CA
	return &r, ctx.RegisterResource(prefix_+"CA", name, props, &r, append(opts, pulumi.AdditionalSecretOutputs([]string{"keyPem"}))...)
}

// Certificate is a certificate signed by a CA.
type Certificate struct {
	pulumi.CustomResourceState
	CertPem pulumi.StringOutput `pulumi:"certPem"`
	KeyPem  pulumi.StringOutput `pulumi:"keyPem"`
}

// CertificateArgs describes a certificate.
type CertificateArgs struct {
	CA             *CA
	CommonName     string
	DNSNames, IPs  []string
	URIs           []string
	Server, Client bool
	// Intermediate makes an intermediate CA (a SPIRE server's upstream
	// authority) instead of a leaf.
	Intermediate  bool
	ValidityHours int
}

// NewCertificate issues a certificate.
func NewCertificate(ctx *pulumi.Context, name string, a CertificateArgs, opts ...pulumi.ResourceOption) (*Certificate, error) {
	props := pulumi.Map{"caCertPem": a.CA.CertPem, "caKeyPem": a.CA.KeyPem, "commonName": pulumi.String(a.CommonName),
		"server": pulumi.Bool(a.Server), "client": pulumi.Bool(a.Client), "validityHours": pulumi.Int(a.ValidityHours)}
	if a.Intermediate {
		props["ca"] = pulumi.Bool(true)
	}
	if len(a.DNSNames) > 0 {
		props["dnsNames"] = strings(a.DNSNames)
	}
	if len(a.IPs) > 0 {
		props["ipAddresses"] = strings(a.IPs)
	}
	if len(a.URIs) > 0 {
		props["uris"] = strings(a.URIs)
	}
	var r Certificate
	return &r, ctx.RegisterResource(prefix_+"Certificate", name, props, &r, append(opts, pulumi.AdditionalSecretOutputs([]string{"keyPem"}))...)
}

// TangKeys is a Tang server's key database.
type TangKeys struct {
	pulumi.CustomResourceState
	Thumbprint pulumi.StringOutput `pulumi:"thumbprint"`
}

// NewTangKeys makes (or adopts) Tang keys in dir on a host.
func NewTangKeys(ctx *pulumi.Context, name string, c Connection, dir string, opts ...pulumi.ResourceOption) (*TangKeys, error) {
	var r TangKeys
	return &r, ctx.RegisterResource(prefix_+"TangKeys", name, pulumi.Map{"connection": c.Input(), "dir": pulumi.String(dir)}, &r, opts...)
}

// TangPin is a Tang server a volume binds to.
type TangPin struct {
	URL        string
	Thumbprint pulumi.StringInput
}

// LuksVolume is an encrypted volume bound to Tang.
type LuksVolume struct {
	pulumi.CustomResourceState
	UUID        pulumi.StringOutput `pulumi:"uuid"`
	ClevisSlot  pulumi.IntOutput    `pulumi:"clevisSlot"`
	Verified    pulumi.BoolOutput   `pulumi:"verified"`
	RecoveryKey pulumi.StringOutput `pulumi:"recoveryKey"`
}

// LuksVolumeArgs describes a volume.
type LuksVolumeArgs struct {
	Connection Connection
	Path       string
	SizeMiB    int
	Tang       []TangPin
	Threshold  int
	MountPoint string
}

// NewLuksVolume formats and binds a volume.
func NewLuksVolume(ctx *pulumi.Context, name string, a LuksVolumeArgs, opts ...pulumi.ResourceOption) (*LuksVolume, error) {
	pins := pulumi.Array{}
	for _, t := range a.Tang {
		pins = append(pins, pulumi.Map{"url": pulumi.String(t.URL), "thumbprint": t.Thumbprint})
	}
	props := pulumi.Map{"connection": a.Connection.Input(), "path": pulumi.String(a.Path), "tang": pins, "threshold": pulumi.Int(a.Threshold)}
	if a.SizeMiB > 0 {
		props["sizeMiB"] = pulumi.Int(a.SizeMiB)
	}
	if a.MountPoint != "" {
		props["mountPoint"] = pulumi.String(a.MountPoint)
	}
	var r LuksVolume
	return &r, ctx.RegisterResource(prefix_+"LuksVolume", name, props, &r, append(opts, pulumi.AdditionalSecretOutputs([]string{"recoveryKey"}))...)
}

// FsyncBenchmark is a host disk's measured fdatasync latency, created only
// if it is within the gate.
type FsyncBenchmark struct {
	pulumi.CustomResourceState
	Device pulumi.StringOutput  `pulumi:"device"`
	P50Ms  pulumi.Float64Output `pulumi:"p50Ms"`
	P99Ms  pulumi.Float64Output `pulumi:"p99Ms"`
	MaxMs  pulumi.Float64Output `pulumi:"maxMs"`
}

// FsyncBenchmarkArgs describes a benchmark run.
type FsyncBenchmarkArgs struct {
	Connection Connection
	HostName   string
	Binary     string
	Dir        string
	SizeMiB    int
	GateP99Ms  float64
}

// NewFsyncBenchmark runs the benchmark on a host.
func NewFsyncBenchmark(ctx *pulumi.Context, name string, a FsyncBenchmarkArgs, opts ...pulumi.ResourceOption) (*FsyncBenchmark, error) {
	var r FsyncBenchmark
	return &r, ctx.RegisterResource(prefix_+"FsyncBenchmark", name, pulumi.Map{
		"connection": a.Connection.Input(), "hostName": pulumi.String(a.HostName), "binary": pulumi.String(a.Binary),
		"dir": pulumi.String(a.Dir), "sizeMiB": pulumi.Int(a.SizeMiB), "gateP99Ms": pulumi.Float64(a.GateP99Ms),
	}, &r, opts...)
}

// EtcdCluster is a formed etcd cluster.
type EtcdCluster struct {
	pulumi.CustomResourceState
	ClusterID pulumi.StringOutput    `pulumi:"clusterId"`
	MemberIDs pulumi.StringMapOutput `pulumi:"memberIds"`
}

// EtcdClusterArgs is how to reach it.
type EtcdClusterArgs struct {
	Endpoints []string
	CA        *CA
	Client    *Certificate
	Members   int
	// ExpectClusterID, when set, is the cluster ID it must form under (a
	// ShardRestore's): a new one waits again, after the restarted members.
	ExpectClusterID pulumi.StringInput
}

// NewEtcdCluster waits for a cluster to form.
func NewEtcdCluster(ctx *pulumi.Context, name string, a EtcdClusterArgs, opts ...pulumi.ResourceOption) (*EtcdCluster, error) {
	var r EtcdCluster
	props := pulumi.Map{
		"endpoints": strings(a.Endpoints), "caCertPem": a.CA.CertPem, "certPem": a.Client.CertPem, "keyPem": a.Client.KeyPem,
		"members": pulumi.Int(a.Members),
	}
	if a.ExpectClusterID != nil {
		props["expectClusterId"] = a.ExpectClusterID
	}
	return &r, ctx.RegisterResource(prefix_+"EtcdCluster", name, props, &r, opts...)
}

// EtcdEpoch is a cluster's bootstrapped epoch record (ADR-03): the coord
// cluster initialised above Above when it has no epoch records, then the
// cluster given an epoch allocated from it. An existing record is kept.
type EtcdEpoch struct {
	pulumi.CustomResourceState
	Epoch pulumi.IntOutput `pulumi:"epoch"`
}

// EtcdEpochArgs names the cluster and how to reach it and the coord cluster.
type EtcdEpochArgs struct {
	Cluster        string
	CoordEndpoints []string
	Endpoints      []string
	CA             *CA
	Client         *Certificate
	Above          int
	// Root, when not nil, is etcd's root password: the bootstrap signs in
	// to both clusters as root, as it must once EtcdAuth has turned
	// authentication on (a cluster whose authentication is off lets it
	// in as no user).
	Root pulumi.StringInput
	// Restored: the cluster came back from a snapshot (a DR stack). Its
	// record is only adopted, never made: a restored cluster without one
	// is the operators' to advance.
	Restored bool
}

// NewEtcdEpoch bootstraps a cluster's epoch record.
func NewEtcdEpoch(ctx *pulumi.Context, name string, a EtcdEpochArgs, opts ...pulumi.ResourceOption) (*EtcdEpoch, error) {
	props := pulumi.Map{
		"cluster": pulumi.String(a.Cluster), "coordEndpoints": strings(a.CoordEndpoints), "endpoints": strings(a.Endpoints),
		"caCertPem": a.CA.CertPem, "certPem": a.Client.CertPem, "keyPem": a.Client.KeyPem, "above": pulumi.Int(a.Above),
	}
	if a.Root != nil {
		props["rootPassword"] = pulumi.ToSecret(a.Root)
	}
	if a.Restored {
		props["restored"] = pulumi.Bool(true)
	}
	var r EtcdEpoch
	return &r, ctx.RegisterResource(prefix_+"EtcdEpoch", name, props, &r,
		append(opts, pulumi.AdditionalSecretOutputs([]string{"rootPassword"}))...)
}

// EtcdAuthTokenKey is the key a cluster's members sign and check their
// auth tokens with: the private key's PEM bytes are the HMAC key (etcd's
// --auth-token jwt, HS256; etcdauth.AuthTokenFlag), the public half is
// unused. One per cluster, the same on every member of it, made once.
type EtcdAuthTokenKey struct {
	pulumi.CustomResourceState
	PublicKeyPem  pulumi.StringOutput `pulumi:"publicKeyPem"`
	PrivateKeyPem pulumi.StringOutput `pulumi:"privateKeyPem"`
}

// NewEtcdAuthTokenKey makes cluster's auth token key pair; the private
// key is secret.
func NewEtcdAuthTokenKey(ctx *pulumi.Context, name, cluster string, opts ...pulumi.ResourceOption) (*EtcdAuthTokenKey, error) {
	var r EtcdAuthTokenKey
	return &r, ctx.RegisterResource(prefix_+"EtcdAuthTokenKey", name, pulumi.Map{"cluster": pulumi.String(cluster)}, &r,
		append(opts, pulumi.AdditionalSecretOutputs([]string{"privateKeyPem"}))...)
}

// EtcdAuth is a cluster's etcd users and roles, applied with
// authentication turned on (services/etcdauth, docs/etcd-roles.md).
type EtcdAuth struct {
	pulumi.CustomResourceState
	AuthEnabled pulumi.BoolOutput        `pulumi:"authEnabled"`
	Users       pulumi.StringArrayOutput `pulumi:"users"`
	Roles       pulumi.StringArrayOutput `pulumi:"roles"`
}

// EtcdAuthArgs is how to reach the cluster and every user's password
// (NewPassword makes them): root's, which only bootstrap steps use, and
// the arbiter's, the Admin API's and the audit tailer's.
type EtcdAuthArgs struct {
	Endpoints []string
	CA        *CA
	Client    *Certificate
	Root      pulumi.StringInput
	Arbiter   pulumi.StringInput
	Admin     pulumi.StringInput
	Tailer    pulumi.StringInput
	// Snapshot, when not nil, is the snapshot job's user's password.
	Snapshot pulumi.StringInput
	// RestoredAt, when not nil, is a ShardRestore's: each restore in
	// place applies the users and passwords again over the snapshot's.
	RestoredAt pulumi.StringInput
}

// NewEtcdAuth applies the etcd users and roles to a cluster and turns
// authentication on. Every password is passed as a secret.
func NewEtcdAuth(ctx *pulumi.Context, name string, a EtcdAuthArgs, opts ...pulumi.ResourceOption) (*EtcdAuth, error) {
	var r EtcdAuth
	in := pulumi.Map{
		"endpoints": strings(a.Endpoints), "caCertPem": a.CA.CertPem, "certPem": a.Client.CertPem, "keyPem": a.Client.KeyPem,
		"rootPassword": pulumi.ToSecret(a.Root), "arbiterPassword": pulumi.ToSecret(a.Arbiter),
		"adminPassword": pulumi.ToSecret(a.Admin), "tailerPassword": pulumi.ToSecret(a.Tailer),
	}
	if a.Snapshot != nil {
		in["snapshotPassword"] = pulumi.ToSecret(a.Snapshot)
	}
	if a.RestoredAt != nil {
		in["restoredAt"] = a.RestoredAt
	}
	return &r, ctx.RegisterResource(prefix_+"EtcdAuth", name, in, &r, append(opts, pulumi.AdditionalSecretOutputs(
		[]string{"rootPassword", "arbiterPassword", "adminPassword", "tailerPassword", "snapshotPassword"}))...)
}

// ArchiveBuckets is the audit archive's setup on its MinIO, done with
// the root user at deploy time: the history and records buckets with
// their rules, and the archiver user (the arbiters') with a policy that
// can add history and records but never remove or shorten them.
type ArchiveBuckets struct {
	pulumi.CustomResourceState
	// Policy is the archiver's policy document.
	Policy pulumi.StringOutput `pulumi:"policy"`
}

// ArchiveBucketsArgs: MinIO's https URL and the CA of its certificate,
// the root user's credentials, the buckets and their rules, and the
// archiver's credentials.
type ArchiveBucketsArgs struct {
	URL                          string
	CA                           *CA
	RootUser                     string
	RootPassword                 pulumi.StringInput
	HistoryBucket, RecordsBucket string
	HistoryDays, RecordsYears    int
	RecordsMode                  string
	User                         string
	Password                     pulumi.StringInput
}

// NewArchiveBuckets sets up the archive's buckets and archiver.
func NewArchiveBuckets(ctx *pulumi.Context, name string, a ArchiveBucketsArgs, opts ...pulumi.ResourceOption) (*ArchiveBuckets, error) {
	var r ArchiveBuckets
	return &r, ctx.RegisterResource(prefix_+"ArchiveBuckets", name, pulumi.Map{
		"url": pulumi.String(a.URL), "caCertPem": a.CA.CertPem, "rootUser": pulumi.String(a.RootUser),
		"rootPassword": pulumi.ToSecret(a.RootPassword), "historyBucket": pulumi.String(a.HistoryBucket),
		"recordsBucket": pulumi.String(a.RecordsBucket), "historyDays": pulumi.Int(a.HistoryDays),
		"recordsMode": pulumi.String(a.RecordsMode), "recordsYears": pulumi.Int(a.RecordsYears),
		"user": pulumi.String(a.User), "password": pulumi.ToSecret(a.Password),
	}, &r, opts...)
}

// StoreBuckets is a snapshot store's setup on its MinIO, done with the
// root user at deploy time: a versioned bucket per region with its expiry
// rule, and per region a storer (its snapshot jobs) and a restorer (its
// restores), neither able to delete a snapshot.
type StoreBuckets struct {
	pulumi.CustomResourceState
	Buckets pulumi.StringArrayOutput `pulumi:"buckets"`
}

// StoreRegion is one region's users, as NewPassword makes their
// passwords: its restorer, and each cluster's storer.
type StoreRegion struct {
	Region           string
	Restorer         string
	RestorerPassword pulumi.StringInput
	Clusters         []StoreClusterUser
}

// StoreClusterUser is one cluster's storer, confined to its prefix.
type StoreClusterUser struct {
	Cluster, Storer string
	StorerPassword  pulumi.StringInput
}

// StoreBucketsArgs: MinIO's https URL and the CA of its certificate, the
// root user's credentials, how long snapshots are kept, and the regions.
type StoreBucketsArgs struct {
	URL          string
	CA           *CA
	RootUser     string
	RootPassword pulumi.StringInput
	KeepDays     int
	Regions      []StoreRegion
}

// NewStoreBuckets sets up the snapshot store's buckets and users.
func NewStoreBuckets(ctx *pulumi.Context, name string, a StoreBucketsArgs, opts ...pulumi.ResourceOption) (*StoreBuckets, error) {
	regions := pulumi.Array{}
	for _, r := range a.Regions {
		clusters := pulumi.Array{}
		for _, c := range r.Clusters {
			clusters = append(clusters, pulumi.Map{"cluster": pulumi.String(c.Cluster), "storer": pulumi.String(c.Storer),
				"storerPassword": c.StorerPassword})
		}
		regions = append(regions, pulumi.Map{"region": pulumi.String(r.Region), "restorer": pulumi.String(r.Restorer),
			"restorerPassword": r.RestorerPassword, "clusters": clusters})
	}
	var r StoreBuckets
	return &r, ctx.RegisterResource(prefix_+"VaultBuckets", name, pulumi.Map{
		"url": pulumi.String(a.URL), "caCertPem": a.CA.CertPem, "rootUser": pulumi.String(a.RootUser),
		"rootPassword": pulumi.ToSecret(a.RootPassword), "keepDays": pulumi.Int(a.KeepDays),
		"regions": pulumi.ToSecret(regions),
	}, &r, opts...)
}

// SpireEntries are the registration entries of a region's SPIRE agents on
// its server: exactly these under the agents named (provider.SpireEntries).
type SpireEntries struct {
	pulumi.CustomResourceState
	Count pulumi.IntOutput `pulumi:"entryCount"`
}

// SpireEntriesArgs: the server's host and admin socket, the agents, and
// their entries (spire.Entry, TTL in seconds).
type SpireEntriesArgs struct {
	Connection Connection
	Socket     string
	Parents    []string
	Entries    []SpireEntry
}

// SpireEntry is one registration entry.
type SpireEntry struct {
	SPIFFEID, ParentID string
	Selectors          []string
	TTLSeconds         int
}

// NewSpireEntries keeps the entries on the server.
func NewSpireEntries(ctx *pulumi.Context, name string, a SpireEntriesArgs, opts ...pulumi.ResourceOption) (*SpireEntries, error) {
	entries := pulumi.Array{}
	for _, e := range a.Entries {
		entries = append(entries, pulumi.Map{"spiffeId": pulumi.String(e.SPIFFEID), "parentId": pulumi.String(e.ParentID),
			"selectors": strings(e.Selectors), "x509SvidTtl": pulumi.Int(e.TTLSeconds)})
	}
	var r SpireEntries
	return &r, ctx.RegisterResource(prefix_+"SpireEntries", name, pulumi.Map{"connection": a.Connection.Input(),
		"socket": pulumi.String(a.Socket), "parents": strings(a.Parents), "entries": entries}, &r, opts...)
}

// claimed maps each program run's services, by host and name, to the
// resource that runs it.
var claimed = struct {
	sync.Mutex
	byRun map[*pulumi.Context]map[[2]string]string
}{byRun: map[*pulumi.Context]map[[2]string]string{}}

func claimService(ctx *pulumi.Context, host, service, resource string) error {
	claimed.Lock()
	defer claimed.Unlock()
	run := claimed.byRun[ctx]
	if run == nil {
		run = map[[2]string]string{}
		claimed.byRun[ctx] = run
	}
	k := [2]string{host, service}
	if other, ok := run[k]; ok {
		return fmt.Errorf("service %q on %s: both %s and %s run it; one would stop the other", service, host, other, resource)
	}
	run[k] = resource
	return nil
}
