package components

import (
	"fmt"
	"time"

	"github.com/lockplane/lockplane/infra/nodes"
	"github.com/lockplane/lockplane/infra/topology"
	"github.com/lockplane/lockplane/services/spire"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// Where SPIRE keeps its state and sockets on a host (under its root).
const (
	spireServerData   = "/var/lib/spire/server"
	spireServerSocket = "/run/spire/server/api.sock"
	spireAgentData    = "/var/lib/spire/agent"
	spireAgentSocket  = "/run/spire/agent/public/api.sock"
)

// SpireServer is the region's SPIRE server on the host with role spire.
// It signs SVIDs with a CA of its own under an intermediate of the trust
// domain's root (the stack's SPIFFE CA), so the bundle every profile and
// arbiter holds verifies them; agents attest with x509pop node
// certificates from NodeCA, named by their host.
type SpireServer struct {
	pulumi.ResourceState
	Host topology.Host
	// Port is the server's API on Host's address.
	Port int
	// Socket is the admin socket on the host, where entries are kept.
	Socket string
	NodeCA *nodes.CA
	// Service is the running server, which agents wait for.
	Service *nodes.Service
}

// SpireArgs are the trust domain's root and the halls.
type SpireArgs struct {
	SpiffeCA *nodes.CA
	Halls    map[string]*Hall
}

// NewSpireServer deploys the server.
func NewSpireServer(ctx *pulumi.Context, env *Env, a SpireArgs, opts ...pulumi.ResourceOption) (*SpireServer, error) {
	s, h := env.Stack, *env.Plan.Spire
	srv := &SpireServer{Host: h, Port: s.Spire.Port, Socket: h.HostPath(spireServerSocket)}
	name := s.Region + "-spire-server"
	if err := ctx.RegisterComponentResource("lockplane:infra:SpireServer", name, srv, opts...); err != nil {
		return nil, err
	}
	in := pulumi.Parent(srv)
	var err error
	if srv.NodeCA, err = nodes.NewCA(ctx, name+"-node-ca", s.TrustDomain+" SPIRE node CA", 10*365*24, nil, in); err != nil {
		return nil, err
	}
	td := "spiffe://" + s.TrustDomain
	upstream, err := nodes.NewCertificate(ctx, name+"-upstream", nodes.CertificateArgs{CA: a.SpiffeCA, CommonName: s.TrustDomain + " SPIRE upstream",
		URIs: []string{td}, Intermediate: true, ValidityHours: 5 * 365 * 24}, in)
	if err != nil {
		return nil, err
	}
	conn := env.Connection(h)
	f := func(n string) string { return env.ConfPath(h, "spire/"+n) }
	ttl := s.Spire.SVIDLifetime()
	cfg := spire.ServerConfig{TrustDomain: s.TrustDomain, BindAddress: h.Address, BindPort: s.Spire.Port, SocketPath: srv.Socket,
		DataDir: h.HostPath(spireServerData), NodeCA: f("node-ca.pem"), CATTL: max(24*time.Hour, spire.MinCATTL(ttl)), SVIDTTL: ttl,
		UpstreamCert: f("upstream.crt"), UpstreamKey: f("upstream.key"), UpstreamBundle: f("server-bundle.pem")}
	files := []configFile{{f("node-ca.pem"), srv.NodeCA.CertPem, "0644"}, {f("upstream.crt"), upstream.CertPem, "0644"},
		{f("upstream.key"), upstream.KeyPem, "0600"}, {f("server-bundle.pem"), a.SpiffeCA.CertPem, "0644"}}
	cfg.Postgres = env.SpirePostgres
	b, err := cfg.Render()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var conf pulumi.StringInput = pulumi.String(string(b))
	if cfg.Postgres != "" {
		// The file holds the datastore's password.
		conf = pulumi.ToSecret(conf).(pulumi.StringOutput)
	}
	files = append(files, configFile{f("server.conf"), conf, "0600"})
	deps, triggers, err := putConfig(ctx, conn, name, files, in)
	if err != nil {
		return nil, err
	}
	bin, err := nodes.NewFile(ctx, name+"-bin", nodes.FileArgs{Connection: conn, Path: env.BinPath(h, "spire-server"), Source: env.SpireServer.Path,
		SourceSha256: env.SpireServer.Sha256, Mode: "0755"}, in)
	if err != nil {
		return nil, err
	}
	deps, triggers = append(deps, bin), append(triggers, bin.Sha256)
	srv.Service, err = nodes.NewService(ctx, name+"-service", nodes.ServiceArgs{Connection: conn, Name: "spire-server", Mode: s.SSH.ServiceMode,
		StateDir: env.StateDir(h), Command: pulumi.ToStringArray([]string{env.BinPath(h, "spire-server"), "run", "-config", f("server.conf")}),
		Triggers: triggers, Ready: SpireServerReady(env, h, srv.Socket)}, in, pulumi.DependsOn(deps))
	if err != nil {
		return nil, err
	}
	return srv, ctx.RegisterResourceOutputs(srv, pulumi.Map{"address": pulumi.Sprintf("%s:%d", h.Address, s.Spire.Port),
		"socket": pulumi.String(srv.Socket), "nodeCaCertPem": srv.NodeCA.CertPem})
}

// SpireAgent is a SPIRE agent on one host: it attests as
// spire.AgentID(trust domain, host name) and serves the Workload API on
// Socket to the host's processes.
type SpireAgent struct {
	pulumi.ResourceState
	Host topology.Host
	// ID is the agent's SPIFFE ID, the parent of its host's entries.
	ID string
	// Socket is the Workload API, unix:///path on the host.
	Socket  string
	Service *nodes.Service
}

// NewSpireAgent deploys an agent on h.
func NewSpireAgent(ctx *pulumi.Context, env *Env, srv *SpireServer, a SpireArgs, h topology.Host, opts ...pulumi.ResourceOption) (*SpireAgent, error) {
	s := env.Stack
	ag := &SpireAgent{Host: h, ID: spire.AgentID(s.TrustDomain, h.Name), Socket: "unix://" + h.HostPath(spireAgentSocket)}
	name := s.Region + "-spire-agent-" + h.Name
	if err := ctx.RegisterComponentResource("lockplane:infra:SpireAgent", name, ag, opts...); err != nil {
		return nil, err
	}
	in := pulumi.Parent(ag)
	node, err := nodes.NewCertificate(ctx, name+"-node", nodes.CertificateArgs{CA: srv.NodeCA, CommonName: h.Name, Client: true, ValidityHours: 5 * 365 * 24}, in)
	if err != nil {
		return nil, err
	}
	f := func(n string) string { return env.ConfPath(h, "spire/"+n) }
	conf, err := spire.AgentConfig{TrustDomain: s.TrustDomain, ServerAddress: srv.Host.Address, ServerPort: srv.Port,
		SocketPath: h.HostPath(spireAgentSocket), DataDir: h.HostPath(spireAgentData), TrustBundle: f("agent-bundle.pem"),
		NodeCert: f("node.crt"), NodeKey: f("node.key")}.Render()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	conn := env.Connection(h)
	deps, triggers, err := putConfig(ctx, conn, name, []configFile{{f("agent.conf"), pulumi.String(string(conf)), "0644"},
		{f("agent-bundle.pem"), a.SpiffeCA.CertPem, "0644"}, {f("node.crt"), node.CertPem, "0644"}, {f("node.key"), node.KeyPem, "0600"}}, in)
	if err != nil {
		return nil, err
	}
	bin, err := nodes.NewFile(ctx, name+"-bin", nodes.FileArgs{Connection: conn, Path: env.BinPath(h, "spire-agent"), Source: env.SpireAgent.Path,
		SourceSha256: env.SpireAgent.Sha256, Mode: "0755"}, in)
	if err != nil {
		return nil, err
	}
	deps, triggers = append(deps, bin, srv.Service), append(triggers, bin.Sha256)
	ag.Service, err = nodes.NewService(ctx, name+"-service", nodes.ServiceArgs{Connection: conn, Name: "spire-agent", Mode: s.SSH.ServiceMode,
		StateDir: env.StateDir(h), Command: pulumi.ToStringArray([]string{env.BinPath(h, "spire-agent"), "run", "-config", f("agent.conf")}),
		Triggers: triggers, Ready: SpireAgentReady(env, h, h.HostPath(spireAgentSocket))}, in, pulumi.DependsOn(deps))
	if err != nil {
		return nil, err
	}
	return ag, ctx.RegisterResourceOutputs(ag, pulumi.Map{"id": pulumi.String(ag.ID), "socket": pulumi.String(ag.Socket)})
}

// Spire is the region's SPIRE: the server, an agent on every arbiter and
// workload host, and the registration entries: the arbiter's on its
// hosts, and each LockGrant's workload on every workload host.
type Spire struct {
	pulumi.ResourceState
	Server *SpireServer
	// Agents are by host name.
	Agents  map[string]*SpireAgent
	Entries *nodes.SpireEntries
}

// NewSpire deploys the server, the agents and the entries.
func NewSpire(ctx *pulumi.Context, env *Env, a SpireArgs, opts ...pulumi.ResourceOption) (*Spire, error) {
	s := env.Stack
	sp := &Spire{Agents: map[string]*SpireAgent{}}
	if err := ctx.RegisterComponentResource("lockplane:infra:Spire", s.Region+"-spire", sp, opts...); err != nil {
		return nil, err
	}
	var err error
	if sp.Server, err = NewSpireServer(ctx, env, a, pulumi.Parent(a.Halls[env.Plan.Spire.Hall])); err != nil {
		return nil, err
	}
	ttl := s.Spire.SVIDLifetime()
	var parents, workloads []string
	var entries []spire.Entry
	for _, h := range append(append([]topology.Host{}, env.Plan.Arbiters...), env.Plan.Workloads...) {
		if sp.Agents[h.Name] != nil {
			continue // an arbiter host that also runs workloads
		}
		ag, err := NewSpireAgent(ctx, env, sp.Server, a, h, pulumi.Parent(a.Halls[h.Hall]))
		if err != nil {
			return nil, err
		}
		sp.Agents[h.Name] = ag
		parents = append(parents, ag.ID)
	}
	// The arbiter's ID goes to the installed binary run as root, as its
	// service runs: another user running that binary gets nothing.
	for _, h := range env.Plan.Arbiters {
		e, err := spire.NewEntry("spiffe://"+s.TrustDomain+ArbiterServerID, sp.Agents[h.Name].ID,
			[]string{"unix:path:" + env.BinPath(h, "arbiter"), "unix:uid:0"}, ttl)
		if err != nil {
			return nil, fmt.Errorf("spire: the arbiter's entry on %s: %w", h.Name, err)
		}
		entries = append(entries, e)
	}
	for _, h := range env.Plan.Workloads {
		workloads = append(workloads, sp.Agents[h.Name].ID)
	}
	granted, err := spire.FromGrants(env.Grants, workloads, ttl)
	if err != nil {
		return nil, fmt.Errorf("policies: %w", err)
	}
	entries = append(entries, granted...)
	var list []nodes.SpireEntry
	for _, e := range entries {
		list = append(list, nodes.SpireEntry{SPIFFEID: e.SPIFFEID, ParentID: e.ParentID, Selectors: e.Selectors, TTLSeconds: int(e.X509SVIDTTL / time.Second)})
	}
	if sp.Entries, err = nodes.NewSpireEntries(ctx, s.Region+"-spire-entries", nodes.SpireEntriesArgs{Connection: env.Connection(sp.Server.Host),
		Socket: sp.Server.Socket, Parents: parents, Entries: list}, pulumi.Parent(sp), pulumi.DependsOn([]pulumi.Resource{sp.Server.Service})); err != nil {
		return nil, err
	}
	return sp, ctx.RegisterResourceOutputs(sp, pulumi.Map{"server": pulumi.Sprintf("%s:%d", sp.Server.Host.Address, sp.Server.Port),
		"entries": sp.Entries.Count})
}
