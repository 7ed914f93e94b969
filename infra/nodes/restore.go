package nodes

import "github.com/pulumi/pulumi/sdk/v3/go/pulumi"

// SnapshotStore is a region's snapshot store (dr/snapstore) and one cluster's
// snapshots in it: the coord cluster or an entity shard.
type SnapshotStore struct {
	// URL is the snapshot store's S3 base URL: https, its certificate signed by
	// CACertPem (plain http only on loopback).
	URL       string
	CACertPem pulumi.StringInput
	// AccessKey and SecretKey are a snapshot store user that can read the region's
	// bucket; SecretKey is passed as a secret.
	AccessKey pulumi.StringInput
	SecretKey pulumi.StringInput
	Region    string
	Cluster   string
	// TrustedKeys are the cluster's snapshot signing public keys (the
	// store stack's): a snapshot not signed by one is refused.
	TrustedKeys []string
}

func (v SnapshotStore) props() pulumi.Map {
	m := pulumi.Map{"vaultUrl": pulumi.String(v.URL), "vaultAccessKey": v.AccessKey, "vaultSecretKey": pulumi.ToSecret(v.SecretKey),
		"region": pulumi.String(v.Region), "cluster": pulumi.String(v.Cluster), "trustedKeys": pulumi.ToStringArray(v.TrustedKeys)}
	if v.CACertPem != nil {
		m["vaultCaCertPem"] = v.CACertPem
	}
	return m
}

// StoreSnapshot is one snapshot of a cluster chosen from the snapshot store, by
// name or "latest", and recorded: "latest" is resolved once, when it is
// made, and never again, so every member restored from it restores the
// same snapshot however many the snapshot store gains meanwhile. Outputs are the
// snapshot's manifest.
type StoreSnapshot struct {
	pulumi.CustomResourceState
	// Manifest is the snapshot's name (CLUSTER/TIME-rREVISION-DIGEST).
	Manifest        pulumi.StringOutput `pulumi:"manifest"`
	Revision        pulumi.IntOutput    `pulumi:"revision"`
	SourceClusterID pulumi.StringOutput `pulumi:"sourceClusterId"`
	// Epoch and EpochClusterID are the snapshot's epoch record (0 and ""
	// if it had none); HighestAllocated the coord cluster's highest
	// allocated epoch, a floor for a restored coord cluster's anchor.
	Epoch            pulumi.IntOutput    `pulumi:"epoch"`
	EpochClusterID   pulumi.StringOutput `pulumi:"epochClusterId"`
	HighestAllocated pulumi.IntOutput    `pulumi:"highestAllocated"`
	Sha256           pulumi.StringOutput `pulumi:"sha256"`
	Size             pulumi.IntOutput    `pulumi:"size"`
	TakenAt          pulumi.StringOutput `pulumi:"takenAt"`
	// KeyID is the signing key that vouched for the snapshot; Refused
	// names each snapshot "latest" left out, as {name, reason, detail}:
	// reason "untrusted" (not signed by the cluster's key: a forgery),
	// "incomplete", "overwritten" or "unreadable".
	KeyID   pulumi.StringOutput `pulumi:"keyId"`
	Refused pulumi.ArrayOutput  `pulumi:"refused"`
}

// NewStoreSnapshot chooses snapshot ("latest" or a snapshot's name) of
// v's cluster. Make one per cluster restored and give it to every
// member's EtcdRestore.
func NewStoreSnapshot(ctx *pulumi.Context, name string, v SnapshotStore, snapshot string, opts ...pulumi.ResourceOption) (*StoreSnapshot, error) {
	props := v.props()
	props["snapshot"] = pulumi.String(snapshot)
	var r StoreSnapshot
	return &r, ctx.RegisterResource(prefix_+"VaultSnapshot", name, props, &r,
		append(opts, pulumi.AdditionalSecretOutputs([]string{"vaultSecretKey"}))...)
}

// EtcdRestore is one etcd member's data dir made on its host from a
// snapshot in the snapshot store, as a member of a new cluster (new token, so a
// new cluster ID: the restored cluster is sealed until the operators
// advance its epoch). It writes only an absent or empty data dir, never
// over a member's data. Deleting it leaves the data dir.
type EtcdRestore struct {
	pulumi.CustomResourceState
	Manifest        pulumi.StringOutput `pulumi:"manifest"`
	Revision        pulumi.IntOutput    `pulumi:"revision"`
	SourceClusterID pulumi.StringOutput `pulumi:"sourceClusterId"`
	Epoch           pulumi.IntOutput    `pulumi:"epoch"`
	EpochClusterID  pulumi.StringOutput `pulumi:"epochClusterId"`
	// ClusterID is the restored cluster's ID, as etcd will derive it from
	// the token and the members' peer URLs: what EtcdCluster should see.
	ClusterID  pulumi.StringOutput `pulumi:"clusterId"`
	RestoredAt pulumi.StringOutput `pulumi:"restoredAt"`
}

// EtcdRestoreArgs: the member's host and data dir, the snapshot store, the chosen
// snapshot, and the new cluster. Members and Token must be the same on
// every member's EtcdRestore, and the members' etcd flags
// (--initial-cluster, --initial-cluster-token) must name the same.
type EtcdRestoreArgs struct {
	Connection Connection
	// DataDir is the member's --data-dir on the host (not a mount point).
	DataDir  string
	Store    SnapshotStore
	Snapshot *StoreSnapshot
	// MemberName is this member; Members maps every member's name to its
	// advertised peer URL.
	MemberName string
	Members    map[string]string
	// Token is the new cluster's initial-cluster token (a ClusterToken's),
	// passed as a secret.
	Token pulumi.StringInput
	// RevisionBump, when not zero, starts revisions that far above the
	// snapshot's and marks the older ones compacted.
	RevisionBump int
}

// NewEtcdRestore restores one member's data dir. Order the member's
// Service after it (pulumi.DependsOn).
func NewEtcdRestore(ctx *pulumi.Context, name string, a EtcdRestoreArgs, opts ...pulumi.ResourceOption) (*EtcdRestore, error) {
	props := a.Store.props()
	props["connection"] = a.Connection.Input()
	props["dataDir"] = pulumi.String(a.DataDir)
	props["snapshot"] = a.Snapshot.Manifest
	props["snapshotSha256"] = a.Snapshot.Sha256
	props["memberName"] = pulumi.String(a.MemberName)
	props["members"] = pulumi.ToStringMap(a.Members)
	props["token"] = pulumi.ToSecret(a.Token)
	if a.RevisionBump > 0 {
		props["revisionBump"] = pulumi.Int(a.RevisionBump)
	}
	var r EtcdRestore
	return &r, ctx.RegisterResource(prefix_+"EtcdRestore", name, props, &r,
		append(opts, pulumi.AdditionalSecretOutputs([]string{"vaultSecretKey", "token"}))...)
}

// ShardRestore is a running entity shard restored in place from one
// snapshot: every member stopped, its data dir moved aside (kept) and
// replaced by the snapshot's as a member of a new cluster, so the shard
// comes back sealed under a new cluster ID while the rest of the region
// serves, its revisions above every one it had served (its watchers are
// told theirs are compacted). It does not start the members: put
// RestoredAt in their Services' triggers, which restarts them after it.
// Coord is refused.
type ShardRestore struct {
	pulumi.CustomResourceState
	Manifest        pulumi.StringOutput `pulumi:"manifest"`
	Revision        pulumi.IntOutput    `pulumi:"revision"`
	SourceClusterID pulumi.StringOutput `pulumi:"sourceClusterId"`
	// Epoch and EpochClusterID are the snapshot's epoch record: the
	// restored shard's, bound to a cluster ID it no longer has.
	Epoch          pulumi.IntOutput    `pulumi:"epoch"`
	EpochClusterID pulumi.StringOutput `pulumi:"epochClusterId"`
	// ClusterID is the shard's new ID, as etcd derives it.
	ClusterID pulumi.StringOutput `pulumi:"clusterId"`
	// Replaced maps each member to where its old data dir was moved.
	Replaced   pulumi.StringMapOutput `pulumi:"replaced"`
	RestoredAt pulumi.StringOutput    `pulumi:"restoredAt"`
	// HeadRevision is the running shard's head before it stopped (0: no
	// member answered); RevisionsFrom the restored shard's revision when
	// it starts, every one below it compacted.
	HeadRevision  pulumi.IntOutput `pulumi:"headRevision"`
	RevisionsFrom pulumi.IntOutput `pulumi:"revisionsFrom"`
	// KeyID is the signing key that vouched for the snapshot.
	KeyID pulumi.StringOutput `pulumi:"keyId"`
	// Chosen is the StoreSnapshot it restores (not an output): its
	// Refused names what "latest" left out, which `up` must print for an
	// in-place restore as for a DR stack's.
	Chosen *StoreSnapshot
}

// ShardMember is one running member of the shard restored in place.
type ShardMember struct {
	Connection Connection
	Name       string
	PeerURL    string
	// DataDir is its --data-dir; Service the Service that runs it.
	DataDir  string
	Service  string
	Mode     string
	StateDir string
}

// ShardRestoreArgs: the snapshot store, the chosen snapshot, every member of the
// shard, and how to read the running shard's head revision.
type ShardRestoreArgs struct {
	Store    SnapshotStore
	Snapshot *StoreSnapshot
	Members  []ShardMember
	// Endpoints, CA and Client reach the running shard (the deployer's
	// certificate, as the formed check).
	Endpoints []string
	CA        *CA
	Client    *Certificate
	// RevisionBump (at least 1) is how far above the shard's head its
	// restored revisions start: the margin for what it writes until it
	// stops, and the whole bump when no member answers.
	RevisionBump int
}

// NewShardRestore restores a's shard in place from a.Snapshot, into every
// one of a.Members.
func NewShardRestore(ctx *pulumi.Context, name string, a ShardRestoreArgs, opts ...pulumi.ResourceOption) (*ShardRestore, error) {
	props := a.Store.props()
	props["snapshot"] = a.Snapshot.Manifest
	props["snapshotSha256"] = a.Snapshot.Sha256
	props["endpoints"] = strings(a.Endpoints)
	props["caCertPem"], props["certPem"], props["keyPem"] = a.CA.CertPem, a.Client.CertPem, pulumi.ToSecret(a.Client.KeyPem)
	props["revisionBump"] = pulumi.Int(a.RevisionBump)
	var ms pulumi.Array
	for _, m := range a.Members {
		svc := pulumi.Map{"name": pulumi.String(m.Service), "mode": pulumi.String(m.Mode)}
		if m.StateDir != "" {
			svc["stateDir"] = pulumi.String(m.StateDir)
		}
		ms = append(ms, pulumi.Map{"connection": m.Connection.Input(), "name": pulumi.String(m.Name), "peerUrl": pulumi.String(m.PeerURL),
			"dataDir": pulumi.String(m.DataDir), "service": svc})
	}
	props["members"] = ms
	r := ShardRestore{Chosen: a.Snapshot}
	return &r, ctx.RegisterResource(prefix_+"ShardRestore", name, props, &r,
		append(opts, pulumi.AdditionalSecretOutputs([]string{"vaultSecretKey", "keyPem", "token"}))...)
}
