package components

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/lockplane/lockplane/infra/nodes"
	"github.com/lockplane/lockplane/infra/topology"
	"github.com/lockplane/lockplane/services/fanin"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// FanInServerID is the fan-in control plane's SPIFFE ID path.
const FanInServerID = "/lockplane/fanin"

// FanIn is the fan-in tier's xDS control plane (lockplane-fanin) on every
// arbiter host, publishing the region's arbiters with ring-hash routing
// on the lock key: clients dial xds:///lockplane through any of them
// (docs/fan-in.md).
type FanIn struct {
	pulumi.ResourceState
	// Endpoints are the control planes, host:port, as a client's xDS
	// bootstrap names them.
	Endpoints []string
	// Target is what clients dial.
	Target string
}

// FanInArgs are the arbiters it publishes and the CA of its SVID.
type FanInArgs struct {
	Arbiter  *Arbiter
	SpiffeCA *nodes.CA
	Halls    map[string]*Hall
}

// FanInFlags is lockplane-fanin's command line on a host.
func FanInFlags(s *topology.Stack, listenAddr string, arbiters []string, svid, key, bundle string) []string {
	flags := []string{"--listen", fmt.Sprintf("%s:%d", listenAddr, s.Arbiter.FanInPort), "--name", fanin.DefaultName,
		"--svid-cert", svid, "--svid-key", key, "--bundle", bundle, "--trust-domain", s.TrustDomain}
	return append(flags, "--arbiters", strings.Join(arbiters, ","))
}

// NewFanIn deploys the control plane beside each arbiter on the host
// runtime. On Kubernetes it deploys nothing yet: clients reach the
// arbiters' Service, without key affinity.
func NewFanIn(ctx *pulumi.Context, env *Env, a FanInArgs, opts ...pulumi.ResourceOption) (*FanIn, error) {
	s := env.Stack
	fi := &FanIn{Target: "xds:///" + fanin.DefaultName}
	if err := ctx.RegisterComponentResource("lockplane:infra:FanIn", s.Region+"-fanin", fi, opts...); err != nil {
		return nil, err
	}
	if s.Runtime != topology.RuntimeKubernetes {
		for _, h := range env.Plan.Arbiters {
			if err := fi.onHost(ctx, env, h, a, pulumi.Parent(a.Halls[h.Hall])); err != nil {
				return nil, err
			}
			fi.Endpoints = append(fi.Endpoints, fmt.Sprintf("%s:%d", h.Address, s.Arbiter.FanInPort))
		}
	}
	return fi, ctx.RegisterResourceOutputs(fi, pulumi.Map{"endpoints": pulumi.ToStringArray(fi.Endpoints),
		"target": pulumi.String(fi.Target), "serverId": pulumi.String("spiffe://" + s.TrustDomain + FanInServerID)})
}

// onHost installs lockplane-fanin on h with an SVID that also names h's
// address: a gRPC client checks the control plane's certificate against
// the address its bootstrap dials.
func (fi *FanIn) onHost(ctx *pulumi.Context, env *Env, h topology.Host, a FanInArgs, opts ...pulumi.ResourceOption) error {
	s := env.Stack
	name := s.Region + "-fanin-" + h.Name
	args := nodes.CertificateArgs{CA: a.SpiffeCA, URIs: []string{"spiffe://" + s.TrustDomain + FanInServerID}, Server: true, ValidityHours: 30 * 24}
	if _, err := netip.ParseAddr(h.Address); err == nil {
		args.IPs = []string{h.Address}
	} else {
		args.DNSNames = []string{h.Address}
	}
	svid, err := nodes.NewCertificate(ctx, name+"-svid", args, opts...)
	if err != nil {
		return err
	}
	conn := env.Connection(h)
	cert, key, bundle := env.ConfPath(h, "fanin/svid.crt"), env.ConfPath(h, "fanin/svid.key"), env.ConfPath(h, "fanin/bundle.crt")
	deps, triggers, err := putConfig(ctx, conn, name, []configFile{{cert, svid.CertPem, "0644"}, {key, svid.KeyPem, "0600"},
		{bundle, a.SpiffeCA.CertPem, "0644"}}, opts...)
	if err != nil {
		return err
	}
	bin, err := nodes.NewFile(ctx, name+"-bin", nodes.FileArgs{Connection: conn, Path: env.BinPath(h, "lockplane-fanin"), Source: env.FanIn.Path,
		SourceSha256: env.FanIn.Sha256, Mode: "0755"}, opts...)
	if err != nil {
		return err
	}
	probe, err := probeBinary(ctx, env, h)
	if err != nil {
		return err
	}
	deps, triggers = append(deps, bin, probe), append(triggers, bin.Sha256)
	flags := FanInFlags(s, h.Address, a.Arbiter.Endpoints, cert, key, bundle)
	// The arbiter list is a restart trigger: the control plane publishes
	// the new ring at start.
	triggers = append(triggers, pulumi.String(fmt.Sprint(flags)))
	_, err = nodes.NewService(ctx, name+"-service", nodes.ServiceArgs{Connection: conn, Name: "lockplane-fanin", Mode: s.SSH.ServiceMode,
		StateDir: env.StateDir(h), Command: pulumi.ToStringArray(append([]string{env.BinPath(h, "lockplane-fanin")}, flags...)),
		Triggers: triggers, Ready: FanInReady(env, h)}, append(opts, pulumi.DependsOn(deps))...)
	return err
}
