package components

import (
	"fmt"

	"github.com/lockplane/lockplane/infra/nodes"
	"github.com/lockplane/lockplane/infra/topology"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// VaultUser is a snapshot vault's MinIO root user: its password is made
// once and given to MinIO on the vault host (a 0600 file) and to the
// VaultBuckets resource, never to a region.
const VaultUser = "lockplane"

// VaultStorer and VaultRestorer are a region's users of the vault: a
// cluster's snapshot jobs store as the first (confined to the cluster's
// prefix), a restore reads as the second.
func VaultStorer(region, cluster string) string { return "snap-" + region + "-" + cluster }
func VaultRestorer(region string) string        { return "restore-" + region }

// Vault is a snapshot vault: one MinIO server on its own host (its own
// stack, so it outlives the regions it keeps), serving S3 over TLS with a
// certificate of its own CA, with a versioned bucket per region.
type Vault struct {
	pulumi.ResourceState
	Host topology.Host
	// URL is the S3 base URL: the snapshot jobs' --vault.
	URL string
	CA  *nodes.CA
	// Regions are each region's users' credentials (secret).
	Regions map[string]VaultCredentials
	Buckets *nodes.VaultBuckets
}

// VaultCredentials are one region's users of the vault: its restorer,
// and by cluster the storer and signing key of its snapshot jobs.
type VaultCredentials struct {
	Restorer         string
	RestorerPassword pulumi.StringOutput
	Clusters         map[string]VaultClusterCredentials
}

// VaultClusterCredentials are one cluster's: its storer (its prefix
// only) and its snapshot signing key, the private half secret.
type VaultClusterCredentials struct {
	Storer         string
	StorerPassword pulumi.StringOutput
	SigningKey     pulumi.StringOutput
	PublicKey      pulumi.StringOutput
}

// VaultArgs place the vault.
type VaultArgs struct {
	Host     topology.Host
	Port     int
	KeepDays int
	Regions  []topology.VaultRegion
}

// NewVault installs MinIO on the vault host, runs it, and sets up each
// region's bucket and users.
func NewVault(ctx *pulumi.Context, env *Env, a VaultArgs, opts ...pulumi.ResourceOption) (*Vault, error) {
	h := a.Host
	v := &Vault{Host: h, URL: fmt.Sprintf("https://%s:%d", h.Address, a.Port), Regions: map[string]VaultCredentials{}}
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
		CAName: "Lockplane snapshot vault " + h.Name + " CA", RootUser: VaultUser, RootPassword: rootPassword}, in); err != nil {
		return nil, err
	}
	var regions []nodes.VaultRegion
	password := func(user string) (pulumi.StringOutput, error) {
		p, err := nodes.NewPassword(ctx, name+"-"+user+"-password", "vault", in)
		if err != nil {
			return pulumi.StringOutput{}, err
		}
		return pulumi.ToSecret(p.Password).(pulumi.StringOutput), nil
	}
	for _, r := range a.Regions {
		c := VaultCredentials{Restorer: VaultRestorer(r.Region), Clusters: map[string]VaultClusterCredentials{}}
		if c.RestorerPassword, err = password(c.Restorer); err != nil {
			return nil, err
		}
		nr := nodes.VaultRegion{Region: r.Region, Restorer: c.Restorer, RestorerPassword: c.RestorerPassword}
		for _, cl := range r.Clusters() {
			cc := VaultClusterCredentials{Storer: VaultStorer(r.Region, cl)}
			if cc.StorerPassword, err = password(cc.Storer); err != nil {
				return nil, err
			}
			// Made here, in the vault's state, which no region host can
			// write: the trust anchor a restore verifies snapshots by.
			// Protected: a replacement (a renamed vault host, a
			// --target-replace) would make a new key and leave every
			// snapshot signed by the old one unrestorable; rotating is a
			// deliberate act (docs/dr.md, "Rotating a signing key").
			k, err := nodes.NewSnapshotSigningKey(ctx, name+"-"+r.Region+"-"+cl+"-signing-key", r.Region, cl, in, pulumi.Protect(true))
			if err != nil {
				return nil, err
			}
			cc.SigningKey, cc.PublicKey = pulumi.ToSecret(k.PrivateKeyPem).(pulumi.StringOutput), k.PublicKey
			c.Clusters[cl] = cc
			nr.Clusters = append(nr.Clusters, nodes.VaultClusterUser{Cluster: cl, Storer: cc.Storer, StorerPassword: cc.StorerPassword})
		}
		v.Regions[r.Region] = c
		regions = append(regions, nr)
	}
	if v.Buckets, err = nodes.NewVaultBuckets(ctx, name+"-buckets", nodes.VaultBucketsArgs{URL: v.URL, CA: v.CA,
		RootUser: VaultUser, RootPassword: rootPassword, KeepDays: a.KeepDays, Regions: regions}, in, pulumi.DependsOn([]pulumi.Resource{svc})); err != nil {
		return nil, err
	}
	return v, ctx.RegisterResourceOutputs(v, pulumi.Map{"host": pulumi.String(h.Name), "url": pulumi.String(v.URL),
		"caCertPem": v.CA.CertPem, "buckets": v.Buckets.Buckets})
}
