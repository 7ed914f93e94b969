package components

import (
	"fmt"
	"sync"

	"github.com/lockplane/lockplane/infra/nodes"
	"github.com/lockplane/lockplane/infra/topology"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// The readiness checks of the services others depend on: each Service is
// made only once its check passes on its host (nodes/provider ready.go),
// so `up` reports success only for a region that serves. Every check is a
// plain command line, an input a preview shows.

// nodeProbe is `lockplane-node probe ARGS` on h.
func nodeProbe(env *Env, h topology.Host, args ...string) *nodes.ReadyCheck {
	return &nodes.ReadyCheck{Command: append([]string{env.BinPath(h, "lockplane-node"), "probe"}, args...)}
}

// EtcdReady is a member's check: it accepts connections on its peer port,
// which etcd opens at start. A new member's check asks nothing of its
// peers: with /readyz, each member's create would hold one of Pulumi's
// workers until a majority of its cluster ran, and a deployer with fewer
// workers than members waiting would stall. Whether the cluster formed is
// the EtcdCluster resource's check, which follows every member's. A
// member restarted by an update must also serve its own data (/readyz on
// its metrics listener, less the quorum read: its peers may be restarting
// with it, as after an in-place restore, so it too must not wait for
// them).
func EtcdReady(env *Env, h topology.Host, f EtcdFiles) *nodes.ReadyCheck {
	s := env.Stack.Etcd
	metrics := fmt.Sprintf("%s:%d", h.Address, s.MetricsPort())
	c := nodeProbe(env, h, "tcp", fmt.Sprintf("%s:%d", h.Address, s.PeerPort))
	c.UpdateCommand = nodeProbe(env, h, "http", "http://"+metrics+"/readyz?exclude=linearizable_read").Command
	c.Listens = []string{fmt.Sprintf("%s:%d", h.Address, s.PeerPort), metrics}
	return c
}

// MinIOReady is a MinIO server's check: its write-quorum endpoint over TLS,
// verified with its own CA (caFile on its host).
func MinIOReady(env *Env, h topology.Host, port int, caFile string) *nodes.ReadyCheck {
	c := nodeProbe(env, h, "http", fmt.Sprintf("https://%s:%d/minio/health/cluster", h.Address, port), "--ca", caFile)
	c.Listens = []string{fmt.Sprintf("%s:%d", h.Address, port)}
	return c
}

// ClickHouseReady is the audit store's check: ClickHouse's /ping on the
// HTTP port the arbiters use.
func ClickHouseReady(env *Env, h topology.Host) *nodes.ReadyCheck {
	c := nodeProbe(env, h, "http", fmt.Sprintf("http://%s:%d/ping", h.Address, env.Stack.Audit.HTTPPort))
	c.Listens = []string{fmt.Sprintf("%s:%d", h.Address, env.Stack.Audit.HTTPPort)}
	return c
}

// FanInReady is a fan-in control plane's check: it accepts connections on
// its ADS port, which it opens only once it holds its SVID and has built
// its first snapshot of the arbiters.
func FanInReady(env *Env, h topology.Host) *nodes.ReadyCheck {
	c := nodeProbe(env, h, "tcp", fmt.Sprintf("%s:%d", h.Address, env.Stack.Arbiter.FanInPort))
	c.Listens = []string{fmt.Sprintf("%s:%d", h.Address, env.Stack.Arbiter.FanInPort)}
	return c
}

// SpireServerReady and SpireAgentReady are SPIRE's own health checks, on
// the server's admin socket and the agent's Workload API socket.
func SpireServerReady(env *Env, h topology.Host, socket string) *nodes.ReadyCheck {
	return &nodes.ReadyCheck{Command: []string{env.BinPath(h, "spire-server"), "healthcheck", "-socketPath", socket}}
}

// SpireAgentReady: see SpireServerReady.
func SpireAgentReady(env *Env, h topology.Host, socket string) *nodes.ReadyCheck {
	return &nodes.ReadyCheck{Command: []string{env.BinPath(h, "spire-agent"), "healthcheck", "-socketPath", socket}}
}

// ArbiterReady is an arbiter's check: `arbiter probe`, a gRPC health call
// over mTLS with an SVID of the region's trust domain. It is the arbiter
// binary itself, so that SPIRE issues it the arbiter's SVID (its entry
// selects the binary's path and uid 0). A DR stack's arbiter serves
// sealed until operators advance the epoch: there NOT_SERVING passes too
// (--sealed-ok).
func ArbiterReady(env *Env, h topology.Host, f ArbiterFiles) *nodes.ReadyCheck {
	s := env.Stack
	cmd := []string{env.BinPath(h, "arbiter"), "probe", "--addr", fmt.Sprintf("%s:%d", h.Address, s.Arbiter.Port)}
	if f.SPIFFESocket != "" {
		cmd = append(cmd, "--spiffe-socket", f.SPIFFESocket, "--spiffe-id", "spiffe://"+s.TrustDomain+ArbiterServerID, "--trust-domain", s.TrustDomain)
	} else {
		cmd = append(cmd, "--svid-cert", f.SVID, "--svid-key", f.SVIDKey, "--bundle", f.Bundle, "--trust-domain", s.TrustDomain)
	}
	if s.Restore.Enabled() {
		cmd = append(cmd, "--sealed-ok")
	}
	return &nodes.ReadyCheck{Command: cmd, Listens: []string{fmt.Sprintf("%s:%d", h.Address, s.Arbiter.Port)}}
}

// probeBins are the lockplane-node files the program installs for the
// checks, one per host and program run: hosts other than etcd's (which
// have it from their Node) may run several checked services.
var probeBins = struct {
	sync.Mutex
	files map[*Env]map[string]*nodes.File
}{files: map[*Env]map[string]*nodes.File{}}

// probeBinary installs lockplane-node on h once, for its services'
// readiness checks; the Services that use it depend on the file returned.
func probeBinary(ctx *pulumi.Context, env *Env, h topology.Host) (*nodes.File, error) {
	probeBins.Lock()
	defer probeBins.Unlock()
	byHost := probeBins.files[env]
	if byHost == nil {
		byHost = map[string]*nodes.File{}
		probeBins.files[env] = byHost
	}
	if f := byHost[h.Name]; f != nil {
		return f, nil
	}
	// No parent: whichever service of the host asks first, the file's
	// name stays the same.
	f, err := nodes.NewFile(ctx, h.Name+"-probe-lockplane-node", nodes.FileArgs{Connection: env.Connection(h), Path: env.BinPath(h, "lockplane-node"),
		Source: env.Node.Path, SourceSha256: env.Node.Sha256, Mode: "0755"})
	if err != nil {
		return nil, err
	}
	byHost[h.Name] = f
	return f, nil
}
