// Package program is the Pulumi program of a Lockplane region: it reads
// the stack's typed configuration, refuses a topology its hosts cannot
// carry before creating anything, and builds the Region component. The
// same function runs under `lockplane up` (the Automation API's inline
// program) and a standard `pulumi up` (infra/main.go).
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
var keys = []string{"region", "runtime", "halls", "hosts", "ssh", "coord", "entity", "tang", "gates", "etcd", "arbiter", "audit", "archive", "kubernetes", "binDir", "trustDomain", "policies", "operators"}

// LoadStack reads the stack's configuration into a topology.Stack, with
// defaults filled and relative paths made absolute against base.
func LoadStack(get func(key string) string, base string) (*topology.Stack, error) {
	var b bytes.Buffer
	b.WriteString("{")
	n := 0
	for _, k := range keys {
		raw := strings.TrimSpace(get(k))
		if raw == "" {
			continue
		}
		if n > 0 {
			b.WriteString(",")
		}
		n++
		q, _ := json.Marshal(k)
		b.Write(q)
		b.WriteString(":")
		if (strings.HasPrefix(raw, "{") || strings.HasPrefix(raw, "[")) && json.Valid([]byte(raw)) {
			b.WriteString(raw)
		} else {
			q, _ := json.Marshal(raw)
			b.Write(q)
		}
	}
	b.WriteString("}")
	var s topology.Stack
	dec := json.NewDecoder(&b)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("stack configuration: %v", err)
	}
	s.Defaults()
	home, _ := os.UserHomeDir()
	abs := func(p *string) {
		if strings.HasPrefix(*p, "~/") && home != "" {
			*p = filepath.Join(home, (*p)[2:])
		}
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(base, *p)
		}
	}
	abs(&s.SSH.PrivateKeyFile)
	abs(&s.SSH.KnownHostsFile)
	abs(&s.BinDir)
	abs(&s.Policies)
	abs(&s.Operators.CAFile)
	for i := range s.Hosts {
		abs(&s.Hosts[i].Root)
	}
	return &s, nil
}

// Run is the program.
func Run(ctx *pulumi.Context) error {
	cfg := config.New(ctx, Namespace)
	base, err := os.Getwd()
	if err != nil {
		return err
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
	ctx.Export("arbiterServerId", pulumi.String("spiffe://"+s.TrustDomain+components.ArbiterServerID))
	ctx.Export("spiffeBundlePem", region.SpiffeCA.CertPem)
	ctx.Export("clientSvidPem", region.Arbiter.Client.CertPem)
	ctx.Export("clientKeyPem", pulumi.ToSecret(region.Arbiter.Client.KeyPem))
	ctx.Export("operatorSvidPem", region.Arbiter.Operator.CertPem)
	ctx.Export("operatorKeyPem", pulumi.ToSecret(region.Arbiter.Operator.KeyPem))
	ctx.Export("acquireP99GateMs", pulumi.Float64(s.Gates.AcquireP99Ms))
	if region.Audit != nil {
		ctx.Export("auditStoreUrl", pulumi.String(region.Audit.URL))
	}
	if region.Archive != nil {
		ctx.Export("archiveUrl", pulumi.String(region.Archive.URL))
		ctx.Export("archiveCaCertPem", region.Archive.CA.CertPem)
	}
	// Set by `lockplane promote` when the stack met its acquire gate.
	if rec := cfg.Get("promotion"); rec != "" {
		ctx.Export("promotion", pulumi.String(rec))
	}
	return nil
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
	env := &components.Env{Stack: s, Plan: plan, KnownHosts: map[string]string{}}
	if env.Policies, err = loadPolicies(s); err != nil {
		return nil, err
	}
	if f := s.Operators.CAFile; f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("operators.caFile: %v", err)
		}
		env.OperatorsCA = string(b)
	}
	key, err := os.ReadFile(s.SSH.PrivateKeyFile)
	if err != nil {
		return nil, fmt.Errorf("ssh.privateKeyFile: %v", err)
	}
	env.PrivateKey = string(key)
	if s.SSH.KnownHostsFile != "" {
		if env.KnownHosts, err = readKnownHosts(s.SSH.KnownHostsFile); err != nil {
			return nil, fmt.Errorf("ssh.knownHostsFile: %v", err)
		}
	}
	for _, h := range s.Hosts {
		if h.HostKey == "" && env.KnownHosts[h.Address] == "" && !s.SSH.TrustOnFirstUse {
			return nil, fmt.Errorf("hosts: %s (%s) has no pinned key in hostKey or %s", h.Name, h.Address, s.SSH.KnownHostsFile)
		}
	}
	// Each binary and the make target that builds it.
	type binary struct {
		name, make string
		into       *components.Binary
	}
	bins := []binary{{"etcd", "build", &env.Etcd}, {"arbiter", "build", &env.Arbiter}, {"lockplane-node", "build", &env.Node}}
	if env.Plan.Archive != nil {
		bins = append(bins, binary{"minio", "minio", &env.MinIO})
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
func loadPolicies(s *topology.Stack) ([]components.PolicyFile, error) {
	set, err := policy.Load(s.Policies, time.Now())
	if err != nil {
		return nil, fmt.Errorf("policies: %w", err)
	}
	for _, g := range set.Grants {
		if !strings.HasPrefix(g.SPIFFEID, "spiffe://"+s.TrustDomain+"/") {
			return nil, fmt.Errorf("policies: %s: LockGrant %s: spec.spiffeId: %s is not in the stack's trust domain %s", g.File, g.Name, g.SPIFFEID, s.TrustDomain)
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
	return files, err
}
