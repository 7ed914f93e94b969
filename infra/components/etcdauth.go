package components

import (
	"fmt"
	"path"

	"github.com/lockplane/lockplane/infra/nodes"
	"github.com/lockplane/lockplane/services/etcdauth"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// EtcdUsers are the passwords of the region's etcd users (services/etcdauth,
// docs/etcd-roles.md): one set for every cluster of the region, coord and
// entity shards alike, since an arbiter signs in to all of them with one
// --etcd-credentials file. Each is the stack's secure configuration
// (lockplane:etcdRootPassword, etcdArbiterPassword, etcdAdminPassword,
// etcdTailerPassword) or made once at random, and secret either way.
//
// Root's is the deploy's own: EtcdAuth and the epoch bootstrap sign in
// with it, from where `up` runs. It is in no file on any host, and no
// service or person uses it.
type EtcdUsers struct {
	Root, Arbiter, Admin, Tailer pulumi.StringOutput
	// Snapshot is the snapshot jobs' user's password by cluster (etcd's
	// root role, so one per cluster: a member host's file is root of its
	// own cluster only), made only when the region snapshots its
	// clusters; empty otherwise, and EtcdAuth removes the user.
	Snapshot map[string]pulumi.StringOutput
}

// NewEtcdUsers makes (or takes from the configuration) the region's etcd
// users' passwords.
func NewEtcdUsers(ctx *pulumi.Context, env *Env, opts ...pulumi.ResourceOption) (*EtcdUsers, error) {
	name := env.Stack.Region + "-etcd-"
	u := &EtcdUsers{}
	for _, p := range []struct {
		user, key  string
		configured pulumi.StringInput
		into       *pulumi.StringOutput
	}{
		{etcdauth.RootUser, "lockplane:etcdRootPassword", env.EtcdRootPassword, &u.Root},
		{etcdauth.Arbiter, "lockplane:etcdArbiterPassword", env.EtcdArbiterPassword, &u.Arbiter},
		{etcdauth.Admin, "lockplane:etcdAdminPassword", env.EtcdAdminPassword, &u.Admin},
		{etcdauth.Tailer, "lockplane:etcdTailerPassword", env.EtcdTailerPassword, &u.Tailer},
	} {
		var err error
		if *p.into, err = servicePassword(ctx, name+p.user+"-password", "etcd", p.key, p.configured, opts...); err != nil {
			return nil, err
		}
	}
	if env.Stack.Snapshots.Enabled() {
		u.Snapshot = map[string]pulumi.StringOutput{}
		clusters := []string{"coord"}
		for i := range env.Plan.Shards {
			clusters = append(clusters, fmt.Sprintf("entity-%d", i))
		}
		for _, c := range clusters {
			p, err := nodes.NewPassword(ctx, name+etcdauth.Snapshotter+"-"+c+"-password", "etcd", opts...)
			if err != nil {
				return nil, err
			}
			u.Snapshot[c] = pulumi.ToSecret(p.Password).(pulumi.StringOutput)
		}
	}
	return u, nil
}

// snapshot is cluster's snapshot password, nil without snapshots.
func (u *EtcdUsers) snapshot(cluster string) pulumi.StringInput {
	if p, ok := u.Snapshot[cluster]; ok {
		return p
	}
	return nil
}

// EtcdCredentials is an arbiter's --etcd-credentials file (the format the
// arbiter's flag states): the lock path's, the Admin API's and the audit
// tailers' users, never root.
func EtcdCredentials(arbiterPassword, adminPassword, tailerPassword string) string {
	return fmt.Sprintf("arbiter %s:%s\nadmin %s:%s\ntailer %s:%s\n", etcdauth.Arbiter, arbiterPassword,
		etcdauth.Admin, adminPassword, etcdauth.Tailer, tailerPassword)
}

// credentials is the --etcd-credentials file's content, secret.
func (u *EtcdUsers) credentials() pulumi.StringOutput {
	return pulumi.ToSecret(pulumi.All(u.Arbiter, u.Admin, u.Tailer).ApplyT(func(p []any) string {
		return EtcdCredentials(p[0].(string), p[1].(string), p[2].(string))
	})).(pulumi.StringOutput)
}

// EtcdCredentialsFile is the arbiter's --etcd-credentials file: beside its
// etcd certificate (on a host and in a pod alike).
func EtcdCredentialsFile(f ArbiterFiles) string {
	return path.Join(path.Dir(f.EtcdCert), "etcd-credentials")
}

// enableEtcdAuth applies the etcd users and roles to cluster c and turns
// its authentication on (the EtcdAuth resource), as root over TLS with the
// cluster's deployer certificate, after deps: the cluster formed and every
// step that reached it with that certificate alone. A shard restored in
// place has them applied again once it formed: the snapshot holds the
// users and passwords of its time, and the arbiters (the unsealing
// advance among their calls) sign in with the stack's.
func enableEtcdAuth(ctx *pulumi.Context, env *Env, c *EtcdCluster, ca *nodes.CA, u *EtcdUsers, deps []pulumi.Resource, opts ...pulumi.ResourceOption) (*nodes.EtcdAuth, error) {
	a := nodes.EtcdAuthArgs{Endpoints: c.Endpoints, CA: ca, Client: c.Client,
		Root: u.Root, Arbiter: u.Arbiter, Admin: u.Admin, Tailer: u.Tailer, Snapshot: u.snapshot(c.Name)}
	if c.InPlace != nil {
		a.RestoredAt = c.InPlace.RestoredAt
	}
	return nodes.NewEtcdAuth(ctx, env.Stack.Region+"-"+c.Name+"-auth", a, append(opts, pulumi.DependsOn(append([]pulumi.Resource{c}, deps...)))...)
}
