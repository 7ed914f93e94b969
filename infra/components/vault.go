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

// VaultStorer and VaultRestorer are a region's users of the vault: its
// snapshot jobs store as the first, a restore reads as the second.
func VaultStorer(region string) string   { return "snap-" + region }
func VaultRestorer(region string) string { return "restore-" + region }

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

// VaultCredentials are one region's users of the vault.
type VaultCredentials struct {
	Storer, Restorer                 string
	StorerPassword, RestorerPassword pulumi.StringOutput
}

// VaultArgs place the vault.
type VaultArgs struct {
	Host     topology.Host
	Port     int
	KeepDays int
	Regions  []string
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
	for _, r := range a.Regions {
		c := VaultCredentials{Storer: VaultStorer(r), Restorer: VaultRestorer(r)}
		for _, u := range []struct {
			user string
			into *pulumi.StringOutput
		}{{c.Storer, &c.StorerPassword}, {c.Restorer, &c.RestorerPassword}} {
			p, err := nodes.NewPassword(ctx, name+"-"+u.user+"-password", "vault", in)
			if err != nil {
				return nil, err
			}
			*u.into = pulumi.ToSecret(p.Password).(pulumi.StringOutput)
		}
		v.Regions[r] = c
		regions = append(regions, nodes.VaultRegion{Region: r, Storer: c.Storer, StorerPassword: c.StorerPassword,
			Restorer: c.Restorer, RestorerPassword: c.RestorerPassword})
	}
	if v.Buckets, err = nodes.NewVaultBuckets(ctx, name+"-buckets", nodes.VaultBucketsArgs{URL: v.URL, CA: v.CA,
		RootUser: VaultUser, RootPassword: rootPassword, KeepDays: a.KeepDays, Regions: regions}, in, pulumi.DependsOn([]pulumi.Resource{svc})); err != nil {
		return nil, err
	}
	return v, ctx.RegisterResourceOutputs(v, pulumi.Map{"host": pulumi.String(h.Name), "url": pulumi.String(v.URL),
		"caCertPem": v.CA.CertPem, "buckets": v.Buckets.Buckets})
}
