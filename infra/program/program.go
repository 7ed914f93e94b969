// Package program is the Pulumi program of a Lockplane region: it reads
// the stack's typed configuration, refuses a topology its hosts cannot
// carry before creating anything, and builds the Region component. The
// same program runs under `lockplane up` (the Automation API's inline
// program, New with a StoreReader) and a standard `pulumi up`
// (infra/main.go, Run), which refuses a region that names a snapshot store.
package program

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lockplane/lockplane/infra/components"
	"github.com/lockplane/lockplane/infra/monitoring"
	"github.com/lockplane/lockplane/infra/topology"
	"github.com/lockplane/lockplane/nodes/provider"
	"github.com/lockplane/lockplane/services/policy"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/config"
	"sigs.k8s.io/yaml"
)

// Namespace is the configuration namespace: keys are lockplane:<key>.
const Namespace = "lockplane"

// keys are the stack configuration's top-level keys, as in topology.Stack.
var keys = []string{"region", "runtime", "halls", "hosts", "ssh", "coord", "entity", "tang", "gates", "etcd", "arbiter", "audit", "archive", "spire", "snapshots", "monitoring", "restore", "restoreInPlace", "kubernetes", "binDir", "trustDomain", "policies", "operators"}

// LoadStack reads the stack's configuration into a topology.Stack, with
// defaults filled and relative paths made absolute against base.
func LoadStack(get func(key string) string, base string) (*topology.Stack, error) {
	var s topology.Stack
	if err := strictJSON(configJSON(get, keys), &s); err != nil {
		return nil, fmt.Errorf("stack configuration: %v", err)
	}
	s.Defaults()
	for _, p := range []*string{&s.SSH.PrivateKeyFile, &s.SSH.KnownHostsFile, &s.BinDir, &s.Policies, &s.Operators.CAFile, &s.Spire.PostgresFile} {
		absPath(p, base)
	}
	for i := range s.Hosts {
		absPath(&s.Hosts[i].Root, base)
	}
	return &s, nil
}

// configJSON is the stack configuration's keys as one JSON object:
// Pulumi hands a program objects and lists as JSON, scalars as strings.
func configJSON(get func(key string) string, keys []string) []byte {
	raw := map[string]json.RawMessage{}
	for _, k := range keys {
		v := strings.TrimSpace(get(k))
		if v == "" {
			continue
		}
		if (strings.HasPrefix(v, "{") || strings.HasPrefix(v, "[")) && json.Valid([]byte(v)) {
			raw[k] = json.RawMessage(v)
		} else {
			raw[k], _ = json.Marshal(v)
		}
	}
	b, _ := json.Marshal(raw)
	return b
}

// strictJSON decodes b into v, refusing a key v has no field for.
func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// absPath makes a configured path absolute: ~/ is the user's home, and a
// relative path is against base (the repository root).
func absPath(p *string, base string) {
	if home, _ := os.UserHomeDir(); strings.HasPrefix(*p, "~/") && home != "" {
		*p = filepath.Join(home, (*p)[2:])
	}
	if *p != "" && !filepath.IsAbs(*p) {
		*p = filepath.Join(base, *p)
	}
}

// Run is the program without a StoreReader, for a standard `pulumi up`:
// a region that names a store stack is refused, since only `lockplane
// up` hands a region its own snapshot store users.
func Run(ctx *pulumi.Context) error { return New(nil)(ctx) }

// New is the program, reading the store stacks a region names with read:
// a snapshot store's for a stack with lockplane:snapshotStore, a region's
// otherwise.
func New(read StoreReader) pulumi.RunFunc {
	return func(ctx *pulumi.Context) error { return run(ctx, read) }
}

func run(ctx *pulumi.Context, read StoreReader) error {
	cfg := config.New(ctx, Namespace)
	base, err := os.Getwd()
	if err != nil {
		return err
	}
	if cfg.Get("snapshotStore") != "" || cfg.Get("vault") != "" {
		return runStore(ctx, cfg, base)
	}
	s, err := LoadStack(cfg.Get, base)
	if err != nil {
		return err
	}
	env, err := NewEnv(s)
	if err != nil {
		return err
	}
	for key, into := range map[string]*pulumi.StringInput{"auditWriterPassword": &env.AuditWriterPassword,
		"auditReaderPassword": &env.AuditReaderPassword, "archivePassword": &env.ArchivePassword,
		"archiverPassword": &env.ArchiverPassword, "etcdRootPassword": &env.EtcdRootPassword,
		"etcdArbiterPassword": &env.EtcdArbiterPassword, "etcdAdminPassword": &env.EtcdAdminPassword,
		"etcdTailerPassword": &env.EtcdTailerPassword} {
		if *into, err = secretConfig(ctx, cfg, key); err != nil {
			return err
		}
	}
	vs := &stores{read: read, got: map[string]*components.StoreAccess{}}
	if s.Snapshots.Enabled() {
		if env.Store, err = vs.access(ctx, s, "snapshots.storeStack", s.Snapshots.StoreStack); err != nil {
			return err
		}
	}
	if s.Restore.Enabled() {
		// A restored cluster keeps the source region's etcd users; only
		// its root can sign in to set this stack's passwords.
		if env.EtcdRootPassword == nil {
			return fmt.Errorf("restore: the restored clusters keep region %s's etcd users: set %s:etcdRootPassword (secret) to that region's root password", s.Region, Namespace)
		}
		if env.RestoreStore, err = vs.access(ctx, s, "restore.storeStack", s.Restore.StoreStack); err != nil {
			return err
		}
	}
	region, err := components.NewRegion(ctx, env)
	if err != nil {
		return err
	}
	ctx.Export("region", pulumi.String(s.Region))
	ctx.Export("trustDomain", pulumi.String(s.TrustDomain))
	ctx.Export("coordClusterId", region.Coord.ClusterID)
	ctx.Export("coordEndpoints", pulumi.ToStringArray(region.Coord.Endpoints))
	shards := pulumi.StringArray{}
	for _, sh := range region.Shards {
		shards = append(shards, sh.ClusterID)
	}
	ctx.Export("entityClusterIds", shards)
	ctx.Export("arbiterEndpoints", pulumi.ToStringArray(region.Arbiter.Endpoints))
	ctx.Export("fanInEndpoints", pulumi.ToStringArray(region.FanIn.Endpoints))
	ctx.Export("arbiterServerId", pulumi.String("spiffe://"+s.TrustDomain+components.ArbiterServerID))
	ctx.Export("spiffeBundlePem", region.SpiffeCA.CertPem)
	ctx.Export("clientSvidPem", region.Arbiter.Client.CertPem)
	ctx.Export("clientKeyPem", pulumi.ToSecret(region.Arbiter.Client.KeyPem))
	ctx.Export("operatorSvidPem", region.Arbiter.Operator.CertPem)
	ctx.Export("operatorKeyPem", pulumi.ToSecret(region.Arbiter.Operator.KeyPem))
	exportPeople(ctx, region.Arbiter)
	ctx.Export("acquireP99GateMs", pulumi.Float64(s.Gates.AcquireP99Ms))
	if sp := region.Spire; sp != nil {
		// Workloads on these hosts take their identities from the socket.
		var sockets []string
		for _, h := range env.Plan.Workloads {
			sockets = append(sockets, sp.Agents[h.Name].Socket)
		}
		ctx.Export("spireServer", pulumi.Sprintf("%s:%d", sp.Server.Host.Address, sp.Server.Port))
		ctx.Export("spireWorkloadSockets", pulumi.ToStringArray(sockets))
		ctx.Export("spireEntries", sp.Entries.Count)
	}
	if region.Audit != nil {
		ctx.Export("auditStoreUrl", pulumi.String(region.Audit.URL))
	}
	if region.Archive != nil {
		ctx.Export("archiveUrl", pulumi.String(region.Archive.URL))
		ctx.Export("archiveCaCertPem", region.Archive.CA.CertPem)
	}
	if region.Monitor != nil {
		ctx.Export("prometheusUrl", pulumi.String(region.Monitor.PrometheusURL))
		ctx.Export("alertmanagerUrl", pulumi.String(region.Monitor.AlertmanagerURL))
	}
	if env.Store != nil {
		exportSnapshotAccess(ctx, s, env.Store, region)
	}
	if s.Restore.Enabled() {
		exportRestore(ctx, region)
		if f := s.Restore.EpochFloor; f > 0 {
			ctx.Export("restoreEpochFloor", pulumi.Int(int(f)))
		}
	}
	exportRestoreInPlace(ctx, region)
	// Set by `lockplane promote` when the stack met its acquire gate.
	if rec := cfg.Get("promotion"); rec != "" {
		ctx.Export("promotion", pulumi.String(rec))
	}
	return nil
}

// The outputs of operators.people's SVIDs: each person's certificate and
// (secret) key by name, which `lockplane up` writes to the profile as
// identity <name>.
const (
	OperatorPeopleSvidsOutput = "operatorPeopleSvidPems"
	OperatorPeopleKeysOutput  = "operatorPeopleKeyPems"
)

// exportPeople exports each person's operator SVID, the keys as one
// secret: plain outputs, so a preview shows them as an up would make them.
func exportPeople(ctx *pulumi.Context, arb *components.Arbiter) {
	certs, keys := pulumi.StringMap{}, pulumi.StringMap{}
	for name, c := range arb.People {
		certs[name], keys[name] = c.CertPem, c.KeyPem
	}
	ctx.Export(OperatorPeopleSvidsOutput, certs)
	ctx.Export(OperatorPeopleKeysOutput, pulumi.ToSecret(keys))
}

// secretConfig is the secure configuration value lockplane:<key> (set
// with `pulumi config set --secret`), nil when the stack has none. A value
// stored in plain text (in the stack file, for anyone who reads it) is
// refused rather than taken as a secret.
func secretConfig(ctx *pulumi.Context, cfg *config.Config, key string) (pulumi.StringInput, error) {
	full := Namespace + ":" + key
	if _, set := ctx.GetConfig(full); !set {
		return nil, nil
	}
	if !ctx.IsConfigSecret(full) {
		return nil, fmt.Errorf("%s: stored in plain text in the stack's configuration; set it with `pulumi config set --secret %s`", full, full)
	}
	return cfg.RequireSecret(key), nil
}

// NewEnv validates the stack and reads what the program needs from disk:
// the SSH key, the pinned host keys and the binaries' checksums.
func NewEnv(s *topology.Stack) (*components.Env, error) {
	plan, err := s.Validate()
	if err != nil {
		return nil, err
	}
	env, err := hostEnv(s)
	if err != nil {
		return nil, err
	}
	env.Plan = plan
	if env.Policies, env.Grants, env.Owners, err = loadPolicies(s); err != nil {
		return nil, err
	}
	if f := s.Operators.CAFile; f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("operators.caFile: %v", err)
		}
		env.OperatorsCA = string(b)
	}
	// Each binary and the make target that builds it.
	type binary struct {
		name, make string
		into       *components.Binary
	}
	bins := []binary{{"etcd", "build", &env.Etcd}, {"arbiter", "build", &env.Arbiter}, {"lockplane-node", "build", &env.Node},
		{"lockplane-fanin", "build", &env.FanIn}}
	if env.Plan.Archive != nil {
		bins = append(bins, binary{"minio", "minio", &env.MinIO})
	}
	if s.Snapshots.Enabled() {
		bins = append(bins, binary{"lockplane-snapshot", "build", &env.Snapshot})
	}
	if s.SpireEnabled() {
		bins = append(bins, binary{"spire-server", "spire", &env.SpireServer}, binary{"spire-agent", "spire", &env.SpireAgent})
		if f := s.Spire.PostgresFile; f != "" {
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("spire.postgresFile: %v", err)
			}
			dsn := strings.TrimSpace(string(b))
			if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") && !strings.Contains(dsn, "dbname=") {
				return nil, fmt.Errorf("spire.postgresFile: %s does not hold a PostgreSQL connection string (postgres://... or key=value with dbname=)", f)
			}
			env.SpirePostgres = dsn
		}
	}
	for _, b := range bins {
		p := filepath.Join(s.BinDir, b.name)
		sum, err := provider.SumFile(p)
		if err != nil {
			return nil, fmt.Errorf("binDir: %s: %v (run `make %s`)", p, err, b.make)
		}
		*b.into = components.Binary{Path: p, Sha256: sum}
	}
	return env, nil
}

// readKnownHosts reads "address key-type key" lines.
func readKnownHosts(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		for _, addr := range strings.Split(fields[0], ",") {
			out[addr] = fields[1] + " " + fields[2]
		}
	}
	return out, sc.Err()
}

// StackFileConfig reads a stacks/Pulumi.<stack>.yaml file's lockplane
// configuration as Pulumi hands it to a program: objects and lists as
// JSON, scalars as strings.
func StackFileConfig(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f struct {
		Config map[string]json.RawMessage `json:"config"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	out := map[string]string{}
	for k, raw := range f.Config {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			out[k] = s
		} else {
			out[k] = string(raw)
		}
	}
	return out, nil
}

// loadPolicies validates the stack's policy set with the library the
// arbiter and lockctl use, so an invalid class refuses the deploy, and
// reads its files for the arbiters.
func loadPolicies(s *topology.Stack) ([]components.PolicyFile, []policy.Grant, map[string]monitoring.Owner, error) {
	set, err := policy.Load(s.Policies, time.Now())
	if err != nil {
		return nil, nil, nil, fmt.Errorf("policies: %w", err)
	}
	owners := map[string]monitoring.Owner{}
	for ns, o := range set.Owners {
		owners[ns] = monitoring.Owner{Team: o.Team, Webhook: o.Webhook}
	}
	for _, g := range set.Grants {
		if !strings.HasPrefix(g.SPIFFEID, "spiffe://"+s.TrustDomain+"/") {
			return nil, nil, nil, fmt.Errorf("policies: %s: LockGrant %s: spec.spiffeId: %s is not in the stack's trust domain %s", g.File, g.Name, g.SPIFFEID, s.TrustDomain)
		}
	}
	var files []components.PolicyFile
	err = filepath.WalkDir(s.Policies, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(s.Policies, p)
		files = append(files, components.PolicyFile{Path: filepath.ToSlash(rel), Content: string(b)})
		return nil
	})
	return files, set.Grants, owners, err
}
