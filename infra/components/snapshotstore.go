package components

import (
	"fmt"

	"github.com/lockplane/lockplane/infra/nodes"
	"github.com/lockplane/lockplane/infra/topology"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// StoreRootUser is a snapshot store's MinIO root user: its password is made
// once and given to MinIO on the snapshot store host (a 0600 file) and to the
// StoreBuckets resource, never to a region.
const StoreRootUser = "lockplane"

// SnapshotStorer and SnapshotRestorer are a region's users of the snapshot store: a
// cluster's snapshot jobs store as the first (confined to the cluster's
// prefix), a restore reads as the second.
func SnapshotStorer(region, cluster string) string { return "snap-" + region + "-" + cluster }
func SnapshotRestorer(region string) string        { return "restore-" + region }

// SnapshotStore is a snapshot store: one MinIO server on its own host (its own
// stack, so it outlives the regions it keeps), serving S3 over TLS with a
// certificate of its own CA, with a versioned bucket per region.
type SnapshotStore struct {
	pulumi.ResourceState
	Host topology.Host
	// URL is the S3 base URL: the snapshot jobs' --store.
	URL string
	CA  *nodes.CA
	// Regions are each region's users' credentials (secret).
	Regions map[string]StoreCredentials
	Buckets *nodes.StoreBuckets
}

// StoreCredentials are one region's users of the snapshot store: its restorer,
// and by cluster the storer and signing key of its snapshot jobs.
type StoreCredentials struct {
	Restorer         string
	RestorerPassword pulumi.StringOutput
	Clusters         map[string]StoreClusterCredentials
}

// StoreClusterCredentials are one cluster's: its storer (its prefix
// only) and its snapshot signing key, the private half secret.
type StoreClusterCredentials struct {
	Storer         string
	StorerPassword pulumi.StringOutput
	SigningKey     pulumi.StringOutput
	PublicKey      pulumi.StringOutput
}

// SnapshotStoreArgs place the snapshot store.
type SnapshotStoreArgs struct {
	Host     topology.Host
	Port     int
	KeepDays int
	Regions  []topology.StoreRegion
}

// NewSnapshotStore installs MinIO on the snapshot store host, runs it, and sets up each
// region's bucket and users.
func NewSnapshotStore(ctx *pulumi.Context, env *Env, a SnapshotStoreArgs, opts ...pulumi.ResourceOption) (*SnapshotStore, error) {
	h := a.Host
	v := &SnapshotStore{Host: h, URL: fmt.Sprintf("https://%s:%d", h.Address, a.Port), Regions: map[string]StoreCredentials{}}
	name := "vault-" + h.Name
	if err := ctx.RegisterComponentResource("lockplane:infra:Vault", name, v, opts...); err != nil {
		return nil, err
	}
	in := pulumi.Parent(v)
	root, err := nodes.NewPassword(ctx, name+"-root-password", "vault", in)
	if err != nil {
		return nil, err
	}
	rootPassword := pulumi.ToSecret(root.Password).(pulumi.StringOutput)
	var svc *nodes.Service
	if v.CA, svc, err = newMinIOServer(ctx, env, minioServerArgs{Name: name, Host: h, Port: a.Port,
		CAName: "Lockplane snapshot vault " + h.Name + " CA", RootUser: StoreRootUser, RootPassword: rootPassword}, in); err != nil {
		return nil, err
	}
	var regions []nodes.StoreRegion
	password := func(user string) (pulumi.StringOutput, error) {
		p, err := nodes.NewPassword(ctx, name+"-"+user+"-password", "vault", in)
		if err != nil {
			return pulumi.StringOutput{}, err
		}
		return pulumi.ToSecret(p.Password).(pulumi.StringOutput), nil
	}
	for _, r := range a.Regions {
		c := StoreCredentials{Restorer: SnapshotRestorer(r.Region), Clusters: map[string]StoreClusterCredentials{}}
		if c.RestorerPassword, err = password(c.Restorer); err != nil {
			return nil, err
		}
		nr := nodes.StoreRegion{Region: r.Region, Restorer: c.Restorer, RestorerPassword: c.RestorerPassword}
		for _, cl := range r.Clusters() {
			cc := StoreClusterCredentials{Storer: SnapshotStorer(r.Region, cl)}
			if cc.StorerPassword, err = password(cc.Storer); err != nil {
				return nil, err
			}
			// Made here, in the snapshot store's state, which no region host can
			// write: the trust anchor a restore verifies snapshots by.
			// Protected: a replacement (a renamed snapshot store host, a
			// --target-replace) would make a new key and leave every
			// snapshot signed by the old one unrestorable; rotating is a
			// deliberate act (docs/dr.md, "Rotating a signing key").
			k, err := nodes.NewSnapshotSigningKey(ctx, name+"-"+r.Region+"-"+cl+"-signing-key", r.Region, cl, in, pulumi.Protect(true))
			if err != nil {
				return nil, err
			}
			cc.SigningKey, cc.PublicKey = pulumi.ToSecret(k.PrivateKeyPem).(pulumi.StringOutput), k.PublicKey
			c.Clusters[cl] = cc
			nr.Clusters = append(nr.Clusters, nodes.StoreClusterUser{Cluster: cl, Storer: cc.Storer, StorerPassword: cc.StorerPassword})
		}
		v.Regions[r.Region] = c
		regions = append(regions, nr)
	}
	if v.Buckets, err = nodes.NewStoreBuckets(ctx, name+"-buckets", nodes.StoreBucketsArgs{URL: v.URL, CA: v.CA,
		RootUser: StoreRootUser, RootPassword: rootPassword, KeepDays: a.KeepDays, Regions: regions}, in, pulumi.DependsOn([]pulumi.Resource{svc})); err != nil {
		return nil, err
	}
	return v, ctx.RegisterResourceOutputs(v, pulumi.Map{"host": pulumi.String(h.Name), "url": pulumi.String(v.URL),
		"caCertPem": v.CA.CertPem, "buckets": v.Buckets.Buckets})
}
