// Package components holds the Pulumi component resources of a region,
// one per real thing: Region, Hall, Node (a host), TangServer,
// EtcdCluster, EtcdMember, AuditStore, Arbiter and FanIn. Each takes typed args, registers
// its outputs, and decides nothing inside an apply callback, so a preview
// shows every resource an `up` will make.
package components

import (
	"fmt"
	"github.com/lockplane/lockplane/infra/monitoring"
	"path"

	"github.com/lockplane/lockplane/infra/nodes"
	"github.com/lockplane/lockplane/infra/topology"
	"github.com/lockplane/lockplane/nodes/remote"
	"github.com/lockplane/lockplane/services/policy"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// Binary is a local file the program installs, with its checksum.
type Binary struct {
	Path   string
	Sha256 string
}

// Env is what every component of a region shares.
type Env struct {
	Stack *topology.Stack
	Plan  *topology.Plan
	// PrivateKey is the SSH client key; KnownHosts maps an address to its
	// pinned key (from ssh.knownHostsFile).
	PrivateKey string
	KnownHosts map[string]string
	// Etcd, Arbiter and Node are the binaries etcd, arbiter and
	// lockplane-node; MinIO is minio's, with an archive or snapshot store host
	// only; Snapshot is lockplane-snapshot's, with snapshots on only.
	// FanIn is lockplane-fanin's.
	Etcd, Arbiter, Node, MinIO, Snapshot, FanIn Binary
	// SpireServer and SpireAgent are SPIRE's (`make spire`), with a spire
	// host only.
	SpireServer, SpireAgent Binary
	// SpirePostgres is the SPIRE datastore's connection string, a secret
	// (the file holding it is one in the state); empty for SQLite on the
	// server's host.
	SpirePostgres string
	// Grants are the policy set's LockGrants: SPIRE's entries come from
	// their workloads.
	Grants []policy.Grant
	// Owners are the policy set's namespace owners, whom the monitoring
	// host's Alertmanager tells of their namespaces' alerts.
	Owners map[string]monitoring.Owner
	// Store is the region's snapshot store, nil without snapshots;
	// RestoreStore the snapshot store a DR stack restores from, nil otherwise.
	Store, RestoreStore *StoreAccess
	// Policies are the validated policy set's files, for the arbiters.
	Policies []PolicyFile
	// OperatorsCA is the content of operators.caFile, empty without one.
	OperatorsCA string
	// AuditWriterPassword and AuditReaderPassword, when not nil, are the
	// audit store's users' passwords (secure stack configuration); nil
	// ones are made once at random and kept secret in the state.
	AuditWriterPassword, AuditReaderPassword pulumi.StringInput
	// ArchivePassword is the archive's MinIO root password and
	// ArchiverPassword its archiver user's (the arbiters'), the same way.
	ArchivePassword, ArchiverPassword pulumi.StringInput
	// EtcdRootPassword, EtcdArbiterPassword, EtcdAdminPassword and
	// EtcdTailerPassword are the region's etcd users' (EtcdUsers), the
	// same way.
	EtcdRootPassword, EtcdArbiterPassword, EtcdAdminPassword, EtcdTailerPassword pulumi.StringInput
}

// PolicyFile is one file of the policy set, by its path in the set.
type PolicyFile struct {
	Path, Content string
}

// Connection is how resources reach host h.
func (e *Env) Connection(h topology.Host) nodes.Connection {
	key := h.HostKey
	if key == "" {
		key = e.KnownHosts[h.Address]
	}
	return nodes.Connection{Target: remote.Target{Host: h.Address, User: e.Stack.SSH.User, PrivateKey: e.PrivateKey,
		HostKey: key, TrustOnFirstUse: e.Stack.SSH.TrustOnFirstUse}}
}

// StateDir is where services keep pid files and logs on h.
func (e *Env) StateDir(h topology.Host) string { return h.HostPath("/var/lib/lockplane/run") }

// BinPath is where binary name is installed on h.
func (e *Env) BinPath(h topology.Host, name string) string {
	return h.HostPath("/opt/lockplane/bin/" + name)
}

// ConfPath is where configuration file name goes on h.
func (e *Env) ConfPath(h topology.Host, name string) string {
	return h.HostPath("/etc/lockplane/" + name)
}

// TangURL is the URL of a Tang server on h.
func (e *Env) TangURL(h topology.Host) string {
	return fmt.Sprintf("http://%s:%d", h.Address, e.Stack.Tang.Port)
}

// configFile is one file a service reads, with the content it must have.
type configFile struct {
	path    string
	content pulumi.StringInput
	mode    string
}

// putConfig puts files on a host for a service, returning them (to depend
// on) and their checksums (to restart the service when one changes).
func putConfig(ctx *pulumi.Context, conn nodes.Connection, prefix string, files []configFile, opts ...pulumi.ResourceOption) ([]pulumi.Resource, pulumi.StringArray, error) {
	var deps []pulumi.Resource
	triggers := pulumi.StringArray{}
	for _, f := range files {
		r, err := nodes.NewFile(ctx, prefix+"-"+path.Base(f.path), nodes.FileArgs{Connection: conn, Path: f.path, Content: f.content, Mode: f.mode}, opts...)
		if err != nil {
			return nil, nil, err
		}
		deps = append(deps, r)
		triggers = append(triggers, r.Sha256)
	}
	return deps, triggers, nil
}
