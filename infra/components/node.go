package components

import (
	"github.com/lockplane/lockplane/infra/nodes"
	"github.com/lockplane/lockplane/infra/topology"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// Node is an etcd host made ready for a member: lockplane-node installed,
// the data volume encrypted and bound to Tang (verified to unlock through
// it), and the data disk's fsync p99 measured within the stack's gate.
type Node struct {
	pulumi.ResourceState
	Host  topology.Host
	Luks  *nodes.LuksVolume
	Fsync *nodes.FsyncBenchmark
}

// NewNode prepares host h; tang are the servers its volume binds to.
func NewNode(ctx *pulumi.Context, env *Env, h topology.Host, tang []*TangServer, opts ...pulumi.ResourceOption) (*Node, error) {
	n := &Node{Host: h}
	if err := ctx.RegisterComponentResource("lockplane:infra:Node", h.Name, n, opts...); err != nil {
		return nil, err
	}
	in := pulumi.Parent(n)
	conn := env.Connection(h)
	bin, err := nodes.NewFile(ctx, h.Name+"-lockplane-node", nodes.FileArgs{Connection: conn, Path: env.BinPath(h, "lockplane-node"),
		Source: env.Node.Path, SourceSha256: env.Node.Sha256, Mode: "0755"}, in)
	if err != nil {
		return nil, err
	}
	var pins []nodes.TangPin
	var tangDeps []pulumi.Resource
	for _, t := range tang {
		pins = append(pins, nodes.TangPin{URL: t.URL, Thumbprint: t.Keys.Thumbprint})
		tangDeps = append(tangDeps, t.Service)
	}
	// A block device is opened and mounted as the data disk; an image file
	// (test hosts: no device-mapper) is bound and verified only.
	mount := ""
	if h.LuksImageMiB == 0 {
		mount = h.HostPath(h.DataDisk)
	}
	if n.Luks, err = nodes.NewLuksVolume(ctx, h.Name+"-data", nodes.LuksVolumeArgs{Connection: conn, Path: h.HostPath(h.LuksDevice),
		SizeMiB: h.LuksImageMiB, Tang: pins, Threshold: 1, MountPoint: mount}, in, pulumi.DependsOn(tangDeps)); err != nil {
		return nil, err
	}
	if n.Fsync, err = nodes.NewFsyncBenchmark(ctx, h.Name+"-fsync", nodes.FsyncBenchmarkArgs{Connection: conn, HostName: h.Name,
		Binary: env.BinPath(h, "lockplane-node"), Dir: h.HostPath(h.DataDisk), SizeMiB: env.Stack.Gates.FsyncSizeMiB,
		GateP99Ms: env.Stack.Gates.FsyncP99Ms}, in, pulumi.DependsOn([]pulumi.Resource{bin, n.Luks})); err != nil {
		return nil, err
	}
	return n, ctx.RegisterResourceOutputs(n, pulumi.Map{
		"address": pulumi.String(h.Address), "hall": pulumi.String(h.Hall),
		"luksUuid": n.Luks.UUID, "fsyncP99Ms": n.Fsync.P99Ms, "fsyncDevice": n.Fsync.Device,
	})
}

// TangServer is a Tang server on its dedicated host.
type TangServer struct {
	pulumi.ResourceState
	URL     string
	Keys    *nodes.TangKeys
	Service *nodes.Service
}

// NewTangServer makes Tang's keys on h and serves them.
func NewTangServer(ctx *pulumi.Context, env *Env, h topology.Host, opts ...pulumi.ResourceOption) (*TangServer, error) {
	t := &TangServer{URL: env.TangURL(h)}
	if err := ctx.RegisterComponentResource("lockplane:infra:TangServer", h.Name, t, opts...); err != nil {
		return nil, err
	}
	in := pulumi.Parent(t)
	conn := env.Connection(h)
	db := h.HostPath("/var/db/tang")
	var err error
	if t.Keys, err = nodes.NewTangKeys(ctx, h.Name+"-tang-keys", conn, db, in); err != nil {
		return nil, err
	}
	// tangd answers one HTTP exchange on stdio; socat serves it on TCP
	// (Debian's unit does the same with socket activation).
	if t.Service, err = nodes.NewService(ctx, h.Name+"-tangd", nodes.ServiceArgs{Connection: conn, Name: "tangd", Mode: env.Stack.SSH.ServiceMode,
		StateDir: env.StateDir(h),
		Command: pulumi.ToStringArray([]string{"/usr/bin/socat", "TCP-LISTEN:" + itoa(env.Stack.Tang.Port) + ",bind=" + h.Address + ",reuseaddr,fork",
			"EXEC:/usr/libexec/tangd " + db})}, in, pulumi.DependsOn([]pulumi.Resource{t.Keys})); err != nil {
		return nil, err
	}
	return t, ctx.RegisterResourceOutputs(t, pulumi.Map{"url": pulumi.String(t.URL), "thumbprint": t.Keys.Thumbprint})
}
