package components

import (
	"fmt"
	"path"
	"strings"

	"github.com/lockplane/lockplane/infra/nodes"
	"github.com/lockplane/lockplane/infra/topology"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// ArbiterServerID is the arbiter's SPIFFE ID path in a trust domain.
const ArbiterServerID = "/lockplane/arbiter"

// Arbiter is the lock service of a region: on hosts, or as a Kubernetes
// deployment, serving the coord cluster.
type Arbiter struct {
	pulumi.ResourceState
	Endpoints []string
	// Client is an SVID for a demo workload (spiffe://td/ns/demo/sa/lockctl)
	// and Operator the shared operator one (spiffe://td/operator/deployer),
	// for the first lock after `up` and the one-person admin calls.
	Client, Operator *nodes.Certificate
	// People are each operators.people's own operator SVID
	// (spiffe://td/operator/<name>), by name: the arbiter takes a
	// person's ID token only on their own SVID (docs/operators.md).
	People map[string]*nodes.Certificate
	// Answered are what answered each arbiter host's readiness check
	// (its address, "ADDR sealed" in a DR stack), in host order.
	Answered pulumi.StringArray
}

// OperatorPath is the SPIFFE ID path of the operator SVID whose last
// segment is name: a person's account, or the shared deployer.
func OperatorPath(name string) string { return "/operator/" + name }

// ArbiterArgs wires the arbiter to its cluster and trust domain.
type ArbiterArgs struct {
	Coord *EtcdCluster
	// Shards are the entity tier's clusters; the arbiters route entity
	// classes' keys to them by the shard map (ADR-07, 09).
	Shards   []*EtcdCluster
	EtcdCA   *nodes.CA
	SpiffeCA *nodes.CA
	Halls    map[string]*Hall
	// Epochs are the clusters' bootstrapped epoch records: the arbiter
	// starts after them, since it never creates one.
	Epochs []pulumi.Resource
	// EtcdUsers are the etcd users the arbiter signs in to every cluster
	// as (its --etcd-credentials file), and EtcdAuth the clusters'
	// EtcdAuth resources: it starts once every cluster has the users.
	EtcdUsers *EtcdUsers
	EtcdAuth  []pulumi.Resource
	// Audit is the region's audit store, nil without one: each arbiter
	// tails its clusters into it and answers audit queries from it.
	Audit *AuditStore
	// Archive is the region's audit archive, nil without one: the elected
	// arbiter copies the audit store's history there every day.
	Archive *Archive
	// Spire is the region's SPIRE, nil without one: each arbiter then
	// takes its SVID from its host's agent, and rotates it, instead of a
	// month-long file from the stack's CA.
	Spire *Spire
}

// ArbiterFlags is the arbiter's command line, with its files at paths.
// The arbiter reads its policy set again every 10 s, so a policy change
// reaches it without a restart. It serves the stack's region: other
// regions' namespaces are refused with a redirect (ADR-08). It signs in to
// every cluster as the etcd users of its --etcd-credentials file
// (docs/etcd-roles.md). With an audit store it runs the audit tailers
// into it (docs/audit.md).
func ArbiterFlags(s *topology.Stack, listenAddr string, a ArbiterArgs, f ArbiterFiles) []string {
	flags := []string{
		"--listen", fmt.Sprintf("%s:%d", listenAddr, s.Arbiter.Port),
		"--metrics-listen", fmt.Sprintf("%s:%d", listenAddr, s.Arbiter.Metrics),
		"--etcd-endpoints", strings.Join(a.Coord.Endpoints, ","),
		"--etcd-cert", f.EtcdCert, "--etcd-key", f.EtcdKey, "--etcd-ca", f.EtcdCA,
		"--cluster", "coord",
		"--policies", f.Policies, "--policy-reload", "10s",
		"--region", s.Region,
		"--etcd-credentials", EtcdCredentialsFile(f),
	}
	if f.SPIFFESocket != "" {
		flags = append(flags, "--spiffe-socket", f.SPIFFESocket, "--spiffe-id", "spiffe://"+s.TrustDomain+ArbiterServerID)
	} else {
		flags = append(flags, "--svid-cert", f.SVID, "--svid-key", f.SVIDKey, "--bundle", f.Bundle, "--trust-domain", s.TrustDomain)
	}
	for _, sh := range a.Shards {
		flags = append(flags, "--shard", sh.Name+"="+strings.Join(sh.Endpoints, ","))
	}
	if a.Audit != nil {
		flags = append(flags, "--audit-store", a.Audit.URL, "--audit-database", a.Audit.Database)
		flags = append(flags, "--audit-credentials", AuditCredentialsFile(f))
	}
	if o := s.Operators; o.Issuer != "" {
		flags = append(flags, "--oidc-issuer", o.Issuer, "--oidc-client-id", o.ClientID, "--oidc-role-claim", o.RoleClaim,
			"--oidc-role", o.Role, "--oidc-amr", strings.Join(o.AMR, ","))
		if o.ACR != "" {
			flags = append(flags, "--oidc-acr", o.ACR)
		}
		if o.AccountClaim != "" {
			flags = append(flags, "--oidc-account-claim", o.AccountClaim)
		}
		if f.OperatorsCA != "" {
			flags = append(flags, "--oidc-ca", f.OperatorsCA)
		}
	}
	if a.Archive != nil && f.ArchiveCredentials != "" {
		flags = append(flags, "--archive", a.Archive.URL, "--archive-credentials", f.ArchiveCredentials, "--archive-ca", f.ArchiveCA,
			"--archive-history-bucket", ArchiveHistoryBucket, "--archive-records-bucket", ArchiveRecordsBucket,
			"--archive-records-mode", s.Archive.RecordsMode,
			"--archive-history-days", fmt.Sprint(s.Archive.HistoryDays), "--archive-records-years", fmt.Sprint(s.Archive.RecordsYears))
	}
	return flags
}

// ArbiterFiles are the arbiter's credentials and policy directory on its
// host.
type ArbiterFiles struct {
	EtcdCert, EtcdKey, EtcdCA, SVID, SVIDKey, Bundle, Policies string
	// SPIFFESocket is the host's SPIRE agent, instead of SVID, SVIDKey
	// and Bundle.
	SPIFFESocket string
	// ArchiveCredentials and ArchiveCA are the archive's, with one.
	ArchiveCredentials, ArchiveCA string
	// OperatorsCA is the operators' provider's CA, with one.
	OperatorsCA string
}

// AuditCredentialsFile is the arbiter's --audit-credentials file: beside
// its other credentials (on a host and in a pod alike).
func AuditCredentialsFile(f ArbiterFiles) string {
	return path.Join(path.Dir(f.EtcdCert), "audit-credentials")
}

// NewArbiter deploys the arbiter in the stack's runtime.
func NewArbiter(ctx *pulumi.Context, env *Env, a ArbiterArgs, opts ...pulumi.ResourceOption) (*Arbiter, error) {
	s := env.Stack
	if a.EtcdUsers == nil {
		return nil, fmt.Errorf("%s-arbiter: the etcd users are required: the arbiter signs in to every cluster with them", s.Region)
	}
	arb := &Arbiter{}
	if err := ctx.RegisterComponentResource("lockplane:infra:Arbiter", s.Region+"-arbiter", arb, opts...); err != nil {
		return nil, err
	}
	in := pulumi.Parent(arb)
	etcdClient, err := nodes.NewCertificate(ctx, s.Region+"-arbiter-etcd", nodes.CertificateArgs{CA: a.EtcdCA, CommonName: "lockplane-arbiter",
		Client: true, ValidityHours: 365 * 24}, in)
	if err != nil {
		return nil, err
	}
	td := "spiffe://" + s.TrustDomain
	var svid *nodes.Certificate // with SPIRE, each arbiter's agent issues it
	if a.Spire == nil {
		if svid, err = nodes.NewCertificate(ctx, s.Region+"-arbiter-svid", nodes.CertificateArgs{CA: a.SpiffeCA, URIs: []string{td + ArbiterServerID},
			Server: true, Client: true, ValidityHours: 30 * 24}, in); err != nil {
			return nil, err
		}
	}
	if arb.Client, err = nodes.NewCertificate(ctx, s.Region+"-demo-svid", nodes.CertificateArgs{CA: a.SpiffeCA,
		URIs: []string{td + "/ns/demo/sa/lockctl"}, Client: true, ValidityHours: 30 * 24}, in); err != nil {
		return nil, err
	}
	if arb.Operator, err = nodes.NewCertificate(ctx, s.Region+"-operator-svid", nodes.CertificateArgs{CA: a.SpiffeCA,
		URIs: []string{td + OperatorPath(topology.OperatorDeployer)}, Client: true, ValidityHours: 24}, in); err != nil {
		return nil, err
	}
	arb.People = map[string]*nodes.Certificate{}
	for _, p := range s.Operators.People {
		if arb.People[p], err = nodes.NewCertificate(ctx, s.Region+"-operator-"+p+"-svid", nodes.CertificateArgs{CA: a.SpiffeCA,
			URIs: []string{td + OperatorPath(p)}, Client: true, ValidityHours: 24}, in); err != nil {
			return nil, err
		}
	}
	if s.Runtime == topology.RuntimeKubernetes {
		if err := deployArbiterKubernetes(ctx, env, arb, a, etcdClient, svid, in); err != nil {
			return nil, err
		}
	} else {
		for _, h := range env.Plan.Arbiters {
			if err := arb.onHost(ctx, env, h, a, etcdClient, svid, pulumi.Parent(a.Halls[h.Hall])); err != nil {
				return nil, err
			}
			arb.Endpoints = append(arb.Endpoints, fmt.Sprintf("%s:%d", h.Address, s.Arbiter.Port))
		}
	}
	return arb, ctx.RegisterResourceOutputs(arb, pulumi.Map{"endpoints": pulumi.ToStringArray(arb.Endpoints),
		"serverId": pulumi.String(td + ArbiterServerID), "answered": arb.Answered})
}

// onHost installs the arbiter binary and its credentials on h and runs it.
func (arb *Arbiter) onHost(ctx *pulumi.Context, env *Env, h topology.Host, a ArbiterArgs, etcdClient, svid *nodes.Certificate, opts ...pulumi.ResourceOption) error {
	s := env.Stack
	conn := env.Connection(h)
	name := s.Region + "-arbiter-" + h.Name
	f := ArbiterFiles{EtcdCert: env.ConfPath(h, "arbiter/etcd.crt"), EtcdKey: env.ConfPath(h, "arbiter/etcd.key"), EtcdCA: env.ConfPath(h, "arbiter/etcd-ca.crt"),
		SVID: env.ConfPath(h, "arbiter/svid.crt"), SVIDKey: env.ConfPath(h, "arbiter/svid.key"), Bundle: env.ConfPath(h, "arbiter/bundle.crt"),
		Policies: env.ConfPath(h, "policies")}
	files := []configFile{
		{f.EtcdCert, etcdClient.CertPem, "0644"}, {f.EtcdKey, etcdClient.KeyPem, "0600"}, {f.EtcdCA, a.EtcdCA.CertPem, "0644"},
	}
	var identity []pulumi.Resource
	if a.Spire != nil {
		ag := a.Spire.Agents[h.Name]
		f.SVID, f.SVIDKey, f.Bundle, f.SPIFFESocket = "", "", "", ag.Socket
		identity = []pulumi.Resource{ag.Service, a.Spire.Entries}
	} else {
		files = append(files, configFile{f.SVID, svid.CertPem, "0644"}, configFile{f.SVIDKey, svid.KeyPem, "0600"},
			configFile{f.Bundle, a.SpiffeCA.CertPem, "0644"})
	}
	if env.OperatorsCA != "" {
		f.OperatorsCA = env.ConfPath(h, "arbiter/oidc-ca.crt")
		files = append(files, configFile{f.OperatorsCA, pulumi.String(env.OperatorsCA), "0644"})
	}
	if a.Archive != nil {
		f.ArchiveCredentials, f.ArchiveCA = env.ConfPath(h, "arbiter/archive-credentials"), env.ConfPath(h, "arbiter/archive-ca.crt")
		files = append(files, configFile{f.ArchiveCredentials, archiveCredentials(a.Archive.ArchiverPassword), "0600"},
			configFile{f.ArchiveCA, a.Archive.CA.CertPem, "0644"})
	}
	deps, triggers, err := putConfig(ctx, conn, name, files, opts...)
	if err != nil {
		return err
	}
	// Policy files are not restart triggers: the arbiter reloads them.
	for _, pf := range env.Policies {
		r, err := nodes.NewFile(ctx, name+"-policy-"+strings.ReplaceAll(pf.Path, "/", "-"), nodes.FileArgs{Connection: conn,
			Path: f.Policies + "/" + pf.Path, Content: pulumi.String(pf.Content), Mode: "0644"}, opts...)
		if err != nil {
			return err
		}
		deps = append(deps, r)
	}
	bin, err := nodes.NewFile(ctx, name+"-bin", nodes.FileArgs{Connection: conn, Path: env.BinPath(h, "arbiter"), Source: env.Arbiter.Path,
		SourceSha256: env.Arbiter.Sha256, Mode: "0755"}, opts...)
	if err != nil {
		return err
	}
	deps = append(deps, bin, a.Coord)
	deps = append(deps, identity...)
	deps = append(deps, a.Epochs...)
	deps = append(deps, a.EtcdAuth...)
	d, t, err := putConfig(ctx, conn, name, []configFile{{EtcdCredentialsFile(f), a.EtcdUsers.credentials(), "0600"}}, opts...)
	if err != nil {
		return err
	}
	deps, triggers = append(deps, d...), append(triggers, t...)
	if a.Audit != nil {
		deps = append(deps, a.Audit.Service) // not required: an arbiter retries an absent store
		d, t, err := a.Audit.putCredentials(ctx, conn, name, AuditCredentialsFile(f), opts...)
		if err != nil {
			return err
		}
		deps, triggers = append(deps, d...), append(triggers, t...)
	}
	if a.Archive != nil {
		deps = append(deps, a.Archive.Service, a.Archive.Buckets) // the same; the archiver exists once Buckets is made
	}
	triggers = append(triggers, bin.Sha256)
	svc, err := nodes.NewService(ctx, name+"-service", nodes.ServiceArgs{Connection: conn, Name: "arbiter", Mode: s.SSH.ServiceMode,
		StateDir: env.StateDir(h), Command: pulumi.ToStringArray(append([]string{env.BinPath(h, "arbiter")}, ArbiterFlags(s, h.Address, a, f)...)),
		Triggers: triggers, Ready: ArbiterReady(env, h, f)}, append(opts, pulumi.DependsOn(deps))...)
	if err != nil {
		return err
	}
	arb.Answered = append(arb.Answered, svc.Answered)
	return nil
}

// archiveCredentials is the arbiter's --archive-credentials file (a
// secret: it stays one): the archiver user's, never root's.
func archiveCredentials(password pulumi.StringOutput) pulumi.StringOutput {
	return pulumi.Sprintf("archive %s:%s\n", ArchiverUser, password)
}
