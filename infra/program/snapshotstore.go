package program

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/lockplane/lockplane/dr/snapstore"
	"github.com/lockplane/lockplane/infra/components"
	"github.com/lockplane/lockplane/infra/nodes"
	"github.com/lockplane/lockplane/infra/topology"
	"github.com/lockplane/lockplane/nodes/provider"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/config"
)

// storeKeys are a store stack's top-level keys, as in topology.StoreConfig.
var storeKeys = []string{"snapshotStore", "vault", "hosts", "ssh", "binDir"}

// LoadStoreConfig reads a store stack's configuration, with defaults filled
// and relative paths made absolute against base.
func LoadStoreConfig(get func(key string) string, base string) (*topology.StoreConfig, error) {
	var v topology.StoreConfig
	if err := strictJSON(configJSON(get, storeKeys), &v); err != nil {
		return nil, fmt.Errorf("store stack configuration: %v", err)
	}
	v.Defaults()
	for _, p := range []*string{&v.SSH.PrivateKeyFile, &v.SSH.KnownHostsFile, &v.BinDir} {
		absPath(p, base)
	}
	for i := range v.Hosts {
		absPath(&v.Hosts[i].Root, base)
	}
	return &v, nil
}

// runStore is a store stack's program: the snapshot store component on its host.
// Its outputs (StoreOutputs) are what `lockplane up` hands each region
// its own users from: the URL, the CA and each region's users, secret.
func runStore(ctx *pulumi.Context, cfg *config.Config, base string) error {
	vs, err := LoadStoreConfig(cfg.Get, base)
	if err != nil {
		return err
	}
	host, err := vs.Validate()
	if err != nil {
		return err
	}
	env, err := hostEnv(vs.Hosting())
	if err != nil {
		return err
	}
	// MinIO, and lockplane-node, whose probe up waits on before it says
	// the snapshot store serves.
	for _, b := range []struct {
		name, make string
		into       *components.Binary
	}{{"minio", "minio", &env.MinIO}, {"lockplane-node", "build", &env.Node}} {
		p := filepath.Join(vs.BinDir, b.name)
		sum, err := provider.SumFile(p)
		if err != nil {
			return fmt.Errorf("binDir: %s: %v (run `make %s`)", p, err, b.make)
		}
		*b.into = components.Binary{Path: p, Sha256: sum}
	}
	v, err := components.NewSnapshotStore(ctx, env, components.SnapshotStoreArgs{Host: host, Port: vs.Store.Port,
		KeepDays: vs.Store.KeepDays, Regions: vs.Store.Regions})
	if err != nil {
		return err
	}
	regions, keys := pulumi.Map{}, pulumi.Map{}
	for r, c := range v.Regions {
		clusters, pubs := pulumi.Map{}, pulumi.Map{}
		for cl, cc := range c.Clusters {
			clusters[cl] = pulumi.Map{"storer": pulumi.String(cc.Storer), "storerPassword": cc.StorerPassword,
				"signingKey": cc.SigningKey, "publicKey": cc.PublicKey}
			pubs[cl] = cc.PublicKey
		}
		regions[r] = pulumi.Map{"bucket": pulumi.String(snapstore.Bucket(r)), "restorer": pulumi.String(c.Restorer),
			"restorerPassword": c.RestorerPassword, "clusters": clusters}
		keys[r] = pubs
	}
	ctx.Export("storeUrl", pulumi.String(v.URL))
	ctx.Export("storeCaCertPem", v.CA.CertPem)
	ctx.Export("storeRegions", pulumi.ToSecret(regions))
	// The public keys alone, readable without --show-secrets: what an
	// operator compares a snapshot's key ID against.
	ctx.Export("storePublicKeys", keys)
	return nil
}

// StoreRegion is one region's entry in a store stack's storeRegions
// output: its bucket, its restorer and each cluster's storer and key.
type StoreRegion struct {
	Bucket           string                  `json:"bucket"`
	Restorer         string                  `json:"restorer"`
	RestorerPassword string                  `json:"restorerPassword"`
	Clusters         map[string]StoreCluster `json:"clusters"`
}

// StoreCluster is one cluster's storer (its prefix only) and snapshot
// signing key: the private key PEM (secret) and the public key's text
// form, which every restore of the cluster verifies by.
type StoreCluster struct {
	Storer         string `json:"storer"`
	StorerPassword string `json:"storerPassword"`
	SigningKey     string `json:"signingKey"`
	PublicKey      string `json:"publicKey"`
}

// StoreOutputs are a deployed store stack's outputs, under the keys
// runStore exports. Regions holds every region's users; a region's
// program keeps its own only.
type StoreOutputs struct {
	URL       string                 `json:"storeUrl"`
	CACertPem string                 `json:"storeCaCertPem"`
	Regions   map[string]StoreRegion `json:"storeRegions"`
}

// OldStoreOutputKeys are a store stack's output keys before the snapshot
// store was renamed (old → new): a store stack not yet updated by this
// version still answers with them.
var OldStoreOutputKeys = map[string]string{"vaultUrl": "storeUrl", "vaultCaCertPem": "storeCaCertPem", "vaultRegions": "storeRegions"}

// StoreReader reads the outputs of the store stack named stack, from the
// backend the region's stack is in. It is how a region gets its snapshot store
// users: a stack reference would store every region's in its state.
type StoreReader func(ctx context.Context, stack string) (StoreOutputs, error)

// stores reads the store stacks a region names, each once per run
// however many fields name it.
type stores struct {
	read StoreReader
	got  map[string]*components.StoreAccess
}

// access is the region's access to the store stack name, its users'
// passwords and signing keys secret: refused, before anything is made,
// without a reader (a plain `pulumi up`), when that stack has not been
// deployed, or when it keeps no bucket for the region or no storer and
// signing key for one of its clusters. field names the configuration
// that named the stack.
func (vs *stores) access(ctx *pulumi.Context, s *topology.Stack, field, name string) (*components.StoreAccess, error) {
	if v := vs.got[name]; v != nil {
		return v, nil
	}
	region := s.Region
	if vs.read == nil {
		return nil, fmt.Errorf("%s: %s: run `bin/lockplane up --stack %s`, which hands the region its own snapshot store users (a stack reference would copy every region's users into this state)", field, name, ctx.Stack())
	}
	out, err := vs.read(ctx.Context(), name)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", field, name, err)
	}
	mine, ok := out.Regions[region]
	entry := fmt.Sprintf("{region: %s, shards: %d}", region, s.Entity.Shards)
	switch {
	case out.URL == "" || out.CACertPem == "":
		return nil, fmt.Errorf("%s: %s has no storeUrl or storeCaCertPem: run `lockplane up --stack %s` first", field, name, name)
	case !ok || mine.Restorer == "" || mine.RestorerPassword == "":
		return nil, fmt.Errorf("%s: %s keeps no snapshots of region %s: add %s to its lockplane:snapshotStore.regions and run `lockplane up --stack %s`", field, name, region, entry, name)
	}
	secret := func(v string) pulumi.StringOutput { return pulumi.ToSecret(pulumi.String(v)).(pulumi.StringOutput) }
	v := &components.StoreAccess{Stack: name, URL: out.URL, CACertPem: pulumi.String(out.CACertPem),
		Restorer: mine.Restorer, RestorerPassword: secret(mine.RestorerPassword), Clusters: map[string]components.StoreClusterAccess{}}
	for _, cl := range topology.RegionClusters(s.Entity.Shards) {
		c := mine.Clusters[cl]
		if c.Storer == "" || c.StorerPassword == "" || c.SigningKey == "" || c.PublicKey == "" {
			// A shard the snapshot store does not know would go unsnapshotted, or
			// restored against no key: name the field that covers it.
			return nil, fmt.Errorf("%s: %s has no storer or snapshot signing key for cluster %s of region %s: set region %s's entry in its lockplane:snapshotStore.regions to %s and run `lockplane up --stack %s`",
				field, name, cl, region, region, entry, name)
		}
		v.Clusters[cl] = components.StoreClusterAccess{Storer: c.Storer, StorerPassword: secret(c.StorerPassword),
			SigningKey: secret(c.SigningKey), PublicKeys: []string{c.PublicKey}}
	}
	vs.got[name] = v
	return v, nil
}

// SnapshotAccess is the region's secret output snapshotAccess: what
// `lockplane snapshot list|take` needs, from where `up` runs.
type SnapshotAccess struct {
	Region     string `json:"region"`
	StoreStack string `json:"storeStack"`
	StoreURL   string `json:"storeUrl"`
	StoreCA    string `json:"storeCaCertPem"`
	EtcdCA     string `json:"etcdCaCertPem"`
	EtcdCert   string `json:"etcdCertPem"`
	EtcdKey    string `json:"etcdKeyPem"`
	// Clusters are each cluster's members, snapshot user's password,
	// snapshot store storer and signing key, and the keys its snapshots verify by.
	Clusters map[string]SnapshotCluster `json:"clusters"`
}

// SnapshotCluster is how `take` reaches one cluster and stores its
// snapshot (as the cluster's own storer, signed with its key), and how
// `list` checks its snapshots (TrustedKeys).
type SnapshotCluster struct {
	Endpoints     []string `json:"endpoints"`
	Password      string   `json:"snapshotPassword"`
	StoreUser     string   `json:"storeUser"`
	StorePassword string   `json:"storePassword"`
	SigningKey    string   `json:"signingKey"`
	TrustedKeys   []string `json:"trustedKeys"`
}

// exportSnapshotAccess exports the region's SnapshotAccess (secret): the
// deployer's etcd certificate, the clusters' snapshot users' passwords
// and each cluster's snapshot store storer and signing key, which the state holds
// already.
func exportSnapshotAccess(ctx *pulumi.Context, s *topology.Stack, v *components.StoreAccess, r *components.Region) {
	clusters := append([]*components.EtcdCluster{r.Coord}, r.Shards...)
	in := []any{v.CACertPem, r.EtcdCA.CertPem, r.Coord.Client.CertPem, r.Coord.Client.KeyPem}
	const fixed, each = 4, 3
	for _, c := range clusters {
		own := v.Clusters[c.Name]
		in = append(in, r.EtcdUsers.Snapshot[c.Name], own.StorerPassword, own.SigningKey)
	}
	access := pulumi.All(in...).ApplyT(func(p []any) (string, error) {
		a := SnapshotAccess{Region: s.Region, StoreStack: v.Stack, StoreURL: v.URL, StoreCA: p[0].(string),
			EtcdCA: p[1].(string), EtcdCert: p[2].(string), EtcdKey: p[3].(string), Clusters: map[string]SnapshotCluster{}}
		for i, c := range clusters {
			q := p[fixed+each*i:]
			a.Clusters[c.Name] = SnapshotCluster{Endpoints: c.Endpoints, Password: q[0].(string),
				StoreUser: v.Clusters[c.Name].Storer, StorePassword: q[1].(string), SigningKey: q[2].(string), TrustedKeys: v.Trusted(c.Name)}
		}
		b, err := json.Marshal(a)
		return string(b), err
	})
	ctx.Export("snapshotStore", pulumi.Map{"stack": pulumi.String(v.Stack), "url": pulumi.String(v.URL),
		"bucket": pulumi.String(snapstore.Bucket(s.Region))})
	ctx.Export("snapshotAccess", pulumi.ToSecret(access))
}

// hostEnv is what host components need of a stack that is not a region:
// its SSH key and pinned host keys.
func hostEnv(s *topology.Stack) (*components.Env, error) {
	env := &components.Env{Stack: s, KnownHosts: map[string]string{}}
	key, err := os.ReadFile(s.SSH.PrivateKeyFile)
	if err != nil {
		return nil, fmt.Errorf("ssh.privateKeyFile: %v", err)
	}
	env.PrivateKey = string(key)
	if s.SSH.KnownHostsFile != "" {
		if env.KnownHosts, err = readKnownHosts(s.SSH.KnownHostsFile); err != nil {
			return nil, fmt.Errorf("ssh.knownHostsFile: %v", err)
		}
	}
	for _, h := range s.Hosts {
		if h.HostKey == "" && env.KnownHosts[h.Address] == "" && !s.SSH.TrustOnFirstUse {
			return nil, fmt.Errorf("hosts: %s (%s) has no pinned key in hostKey or %s", h.Name, h.Address, s.SSH.KnownHostsFile)
		}
	}
	return env, nil
}

// exportRestore exports what a DR stack restored, by cluster: the
// snapshot, the epoch record it holds (bound to the old cluster ID, so
// the cluster is sealed) and, for coord, the floor of the operators'
// anchor. `lockplane up` prints the unseal from it.
func exportRestore(ctx *pulumi.Context, r *components.Region) {
	restored := pulumi.Map{}
	for _, c := range append([]*components.EtcdCluster{r.Coord}, r.Shards...) {
		restored[c.Name] = restoredEntry(c.Snapshot, c.ClusterID)
	}
	ctx.Export("restored", restored)
}

// restoredEntry is one cluster's entry in the restored output.
func restoredEntry(s *nodes.StoreSnapshot, clusterID pulumi.StringOutput) pulumi.Map {
	return pulumi.Map{"manifest": s.Manifest, "revision": s.Revision, "epoch": s.Epoch,
		"sourceClusterId": s.SourceClusterID, "clusterId": clusterID, "highestAllocated": s.HighestAllocated,
		"takenAt": s.TakenAt, "keyId": s.KeyID, "refused": s.Refused}
}

// exportRestoreInPlace exports the shards restored in place, by shard:
// the snapshot, the epoch record it holds (bound to the shard's old
// cluster ID, so it is sealed), the new cluster ID, when, where each
// member's old data dir was moved, and the snapshots "latest" refused.
// `lockplane up` prints the unseal.
func exportRestoreInPlace(ctx *pulumi.Context, r *components.Region) {
	restored := pulumi.Map{}
	for _, c := range r.Shards {
		if p := c.InPlace; p != nil {
			restored[c.Name] = inPlaceEntry(p)
		}
	}
	if len(restored) > 0 {
		ctx.Export("restoredInPlace", restored)
	}
}

// inPlaceEntry is one shard's entry in the restoredInPlace output. Its
// refused is the chosen StoreSnapshot's: a forged snapshot "latest"
// skipped is as much a warning here as in a DR stack.
func inPlaceEntry(p *nodes.ShardRestore) pulumi.Map {
	return pulumi.Map{"manifest": p.Manifest, "revision": p.Revision, "epoch": p.Epoch,
		"sourceClusterId": p.SourceClusterID, "epochClusterId": p.EpochClusterID, "clusterId": p.ClusterID,
		"restoredAt": p.RestoredAt, "replaced": p.Replaced, "keyId": p.KeyID, "refused": p.Chosen.Refused}
}
