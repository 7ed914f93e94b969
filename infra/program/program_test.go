package program_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lockplane/lockplane/dr/snapstore"
	"github.com/lockplane/lockplane/infra/components"
	"github.com/lockplane/lockplane/infra/program"
	"github.com/lockplane/lockplane/services/audit/chserver"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"golang.org/x/crypto/ssh"
)

// mocks records every resource the program registers and answers with
// plausible outputs; it is also the program's snapshot store reader.
type mocks struct {
	mu  sync.Mutex
	res []pulumi.MockResourceArgs
	// outs are the outputs answered, by res's index: the state holds them
	// as well as the inputs.
	outs []resource.PropertyMap
	// stores, when set, are the deployed store stacks by name; otherwise
	// local-snapshots, keeping region local only.
	stores map[string]program.StoreOutputs
	// reads counts the reader's reads by store stack.
	reads map[string]int
}

func (m *mocks) NewResource(a pulumi.MockResourceArgs) (string, resource.PropertyMap, error) {
	m.mu.Lock()
	m.res = append(m.res, a)
	m.mu.Unlock()
	out := a.Inputs.Copy()
	switch a.TypeToken {
	case "lockplane:nodes:CA", "lockplane:nodes:Certificate":
		out["certPem"], out["keyPem"] = resource.NewStringProperty("CERT "+a.Name), resource.NewStringProperty("KEY "+a.Name)
	case "lockplane:nodes:TangKeys":
		out["thumbprint"] = resource.NewStringProperty("thp-" + a.Name)
	case "lockplane:nodes:ClusterToken":
		out["token"] = resource.NewStringProperty(a.Inputs["prefix"].StringValue() + "-0123abcd")
	case "lockplane:nodes:EtcdCluster":
		out["clusterId"] = resource.NewStringProperty("c1d-" + a.Name)
	case "lockplane:nodes:Password":
		out["password"] = resource.MakeSecret(resource.NewStringProperty(mockPassword(a.Name)))
	case "lockplane:nodes:VaultSnapshot":
		out["manifest"] = resource.NewStringProperty(a.Inputs["cluster"].StringValue() + "/20261204T120000.000Z-r42-0123456789ab")
		out["sha256"] = resource.NewStringProperty("sha-" + a.Name)
		out["epoch"], out["highestAllocated"] = resource.NewNumberProperty(3), resource.NewNumberProperty(4)
	case "lockplane:nodes:ShardRestore":
		out["clusterId"] = resource.NewStringProperty("restored-" + a.Name)
		out["restoredAt"] = resource.NewStringProperty("2026-12-04T12:00:00.5Z")
	case "lockplane:nodes:SnapshotSigningKey":
		out["privateKeyPem"] = resource.MakeSecret(resource.NewStringProperty("SIGNING KEY " + a.Name))
		out["publicKey"] = resource.NewStringProperty("ed25519:PUBLIC-" + a.Name)
	case "lockplane:nodes:EtcdAuthTokenKey":
		// Secret as the provider declares it.
		out["publicKeyPem"] = resource.NewStringProperty("PUBLIC KEY " + a.Name)
		out["privateKeyPem"] = resource.MakeSecret(resource.NewStringProperty("PRIVATE KEY " + a.Name))
	}
	m.mu.Lock()
	m.outs = append(m.outs, out)
	m.mu.Unlock()
	return a.Name + "-id", out, nil
}

// readStore is the program's StoreReader: the store stack's outputs as
// `lockplane up` reads them, a stack not deployed refused as it does.
func (m *mocks) readStore(_ context.Context, stack string) (program.StoreOutputs, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.reads == nil {
		m.reads = map[string]int{}
	}
	m.reads[stack]++
	stores := m.stores
	if stores == nil {
		stores = map[string]program.StoreOutputs{"local-snapshots": localStore("local")}
	}
	out, ok := stores[stack]
	if !ok {
		return out, fmt.Errorf("store stack %s is not in the backend: run `lockplane up --stack %s` first", stack, stack)
	}
	return out, nil
}

// localStore is the store stack local-snapshots as deployed, keeping regions,
// each cluster of up to two entity shards with its storer and key.
func localStore(regions ...string) program.StoreOutputs {
	v := program.StoreOutputs{URL: "https://10.231.0.30:9000", CACertPem: "VAULT CA", Regions: map[string]program.StoreRegion{}}
	for _, r := range regions {
		vr := program.StoreRegion{Bucket: snapstore.Bucket(r), Restorer: "restore-" + r, RestorerPassword: "restorer-password-" + r,
			Clusters: map[string]program.StoreCluster{}}
		for _, c := range []string{"coord", "entity-0", "entity-1"} {
			vr.Clusters[c] = program.StoreCluster{Storer: "snap-" + r + "-" + c, StorerPassword: "storer-password-" + r + "-" + c,
				SigningKey: "SIGNING KEY " + r + "-" + c, PublicKey: "ed25519:PUB-" + r + "-" + c}
		}
		v.Regions[r] = vr
	}
	return v
}

// mockPassword is the password the mock provider makes for a Password.
func mockPassword(name string) string { return "generated-" + name }

func (m *mocks) Call(pulumi.MockCallArgs) (resource.PropertyMap, error) {
	return resource.PropertyMap{}, nil
}

func (m *mocks) of(typ string) []pulumi.MockResourceArgs {
	var out []pulumi.MockResourceArgs
	for _, r := range m.res {
		if r.TypeToken == typ {
			out = append(out, r)
		}
	}
	return out
}

// With operators.issuer the arbiters verify operators' ID tokens there:
// --oidc-* flags, and the provider's CA on each arbiter host.
func TestArbitersGetTheOperatorsProvider(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "idp-ca.pem")
	os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\nidp\n-----END CERTIFICATE-----\n"), 0o644)
	m, err := run(t, "local", func(c map[string]string) {
		localHosts(c)
		c["lockplane:operators"] = `{"issuer":"https://keycloak.test/realms/lockplane","roleClaim":"realm_access.roles","caFile":"` + ca + `"}`
	})
	if err != nil {
		t.Fatal(err)
	}
	arbiters := services(m, "arbiter")
	if len(arbiters) != 2 {
		t.Fatalf("%d arbiters", len(arbiters))
	}
	for _, r := range arbiters {
		cmd := strs(r.Inputs["command"])
		if flag(cmd, "--oidc-issuer") != "https://keycloak.test/realms/lockplane" || flag(cmd, "--oidc-client-id") != "lockctl" ||
			flag(cmd, "--oidc-role-claim") != "realm_access.roles" || flag(cmd, "--oidc-role") != "lock-operator" ||
			flag(cmd, "--oidc-amr") != "otp,mfa,hwk" || !strings.HasSuffix(flag(cmd, "--oidc-ca"), "/arbiter/oidc-ca.crt") {
			t.Fatalf("%s: oidc flags of %v", r.Name, cmd)
		}
	}
	cas := 0
	for _, r := range m.of("lockplane:nodes:File") {
		if strings.HasSuffix(r.Inputs["path"].StringValue(), "/arbiter/oidc-ca.crt") && strings.Contains(r.Inputs["content"].StringValue(), "idp") {
			cas++
		}
	}
	if cas != 2 {
		t.Fatalf("%d arbiter hosts got the provider's CA, want 2", cas)
	}
	// Without it, no flag: the two-person actions are refused, saying why.
	m, err = run(t, "local", localHosts)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range services(m, "arbiter") {
		if flag(strs(r.Inputs["command"]), "--oidc-issuer") != "" {
			t.Fatalf("%s has --oidc-issuer without operators.issuer", r.Name)
		}
	}
}

// Each of operators.people gets their own client SVID
// spiffe://td/operator/<name>, beside the shared deployer's: the arbiter
// acts on a person's ID token only on their own SVID.
func TestEachOperatorGetsTheirOwnSVID(t *testing.T) {
	m, err := run(t, "local", func(c map[string]string) {
		localHosts(c)
		c["lockplane:operators"] = `{"issuer":"https://keycloak.test/realms/lockplane","accountClaim":"email","people":["alice","bob"]}`
	})
	if err != nil {
		t.Fatal(err)
	}
	svids := map[string]bool{}
	for _, r := range m.of("lockplane:nodes:Certificate") {
		if !r.Inputs["uris"].IsArray() {
			continue
		}
		for _, u := range strs(r.Inputs["uris"]) {
			if strings.Contains(u, "/operator/") {
				if !r.Inputs["client"].BoolValue() || r.Inputs["server"].BoolValue() {
					t.Fatalf("%s (%s): an operator SVID is a client certificate only", r.Name, u)
				}
				svids[u] = true
			}
		}
	}
	want := map[string]bool{"spiffe://local.lockplane.test/operator/deployer": true,
		"spiffe://local.lockplane.test/operator/alice": true, "spiffe://local.lockplane.test/operator/bob": true}
	if fmt.Sprint(svids) != fmt.Sprint(want) {
		t.Fatalf("operator SVIDs %v, want %v", svids, want)
	}
	for _, r := range services(m, "arbiter") {
		if got := flag(strs(r.Inputs["command"]), "--oidc-account-claim"); got != "email" {
			t.Fatalf("%s: --oidc-account-claim %q, want operators.accountClaim", r.Name, got)
		}
	}
	// A name that is no account is refused before anything is made.
	m, err = run(t, "local", func(c map[string]string) {
		localHosts(c)
		c["lockplane:operators"] = `{"issuer":"https://keycloak.test/realms/lockplane","people":["alice","alice"]}`
	})
	if err == nil || !strings.Contains(err.Error(), `operators.people[1]: "alice" is operators.people[0] too`) || len(m.res) != 0 {
		t.Fatalf("people [alice alice]: %v, %d resources", err, len(m.res))
	}
}

// usEastWithAudit gives the us-east stack (runtime kubernetes) an audit
// host.
func usEastWithAudit(c map[string]string) {
	var hosts []map[string]any
	json.Unmarshal([]byte(c["lockplane:hosts"]), &hosts)
	audit := map[string]any{}
	for k, v := range hosts[len(hosts)-1] {
		audit[k] = v
	}
	audit["name"], audit["address"], audit["roles"] = "us-east-audit-1", "10.9.9.9", []string{"audit"}
	delete(audit, "shard")
	b, _ := json.Marshal(append(hosts, audit))
	c["lockplane:hosts"] = string(b)
	c["lockplane:audit"] = `{"networks":["10.64.0.0/14"]}`
}

// plainSecrets, set in a test's configuration, keeps its passwords plain.
const plainSecrets = "test:plainSecrets"

// run runs the program on a shipped stack file, with stand-in binaries
// and SSH key, under Pulumi's mocks.
func run(t *testing.T, stack string, edit func(map[string]string)) (*mocks, error) {
	t.Helper()
	return runWith(t, &mocks{}, stack, edit)
}

// runWith is run with the given mocks, which read the store stacks as
// `lockplane up` does.
func runWith(t *testing.T, m *mocks, stack string, edit func(map[string]string)) (*mocks, error) {
	t.Helper()
	return runProgram(t, program.New(m.readStore), m, stack, edit)
}

// runProgram is runWith with the given program.
func runProgram(t *testing.T, prog pulumi.RunFunc, m *mocks, stack string, edit func(map[string]string)) (*mocks, error) {
	t.Helper()
	cfg, err := program.StackFileConfig(filepath.Join("..", "..", "stacks", "Pulumi."+stack+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The shipped stack as committed: the e2e test sets these on the same
	// files (pulumi config set) while it runs, perhaps beside these tests.
	for _, k := range []string{"operators", "restoreInPlace", "promotion", "etcdRootPassword"} {
		delete(cfg, program.Namespace+":"+k)
	}
	dir := t.TempDir()
	for _, b := range []string{"etcd", "arbiter", "lockplane-node", "lockplane-fanin", "minio", "lockplane-snapshot", "spire-server", "spire-agent"} {
		os.WriteFile(filepath.Join(dir, b), []byte("binary "+b), 0o755)
	}
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	block, _ := ssh.MarshalPrivateKey(priv, "")
	os.WriteFile(filepath.Join(dir, "id"), pem.EncodeToMemory(block), 0o600)
	var ssh map[string]any
	json.Unmarshal([]byte(cfg["lockplane:ssh"]), &ssh)
	ssh["privateKeyFile"] = filepath.Join(dir, "id")
	b, _ := json.Marshal(ssh)
	cfg["lockplane:ssh"], cfg["lockplane:binDir"] = string(b), dir
	if pol := cfg["lockplane:policies"]; pol != "" && !filepath.IsAbs(pol) {
		cfg["lockplane:policies"] = filepath.Join("..", "..", pol) // the stack's paths are from the repository root
	}
	if edit != nil {
		edit(cfg)
	}
	// Passwords are secure configuration, as `pulumi config set --secret`
	// stores them, unless the test keeps them plain.
	var secret []string
	for k := range cfg {
		if strings.HasSuffix(k, "Password") && cfg[plainSecrets] == "" {
			secret = append(secret, k)
		}
	}
	delete(cfg, plainSecrets)
	keys, _ := json.Marshal(secret)
	t.Setenv(pulumi.EnvConfigSecretKeys, string(keys))
	env, _ := json.Marshal(cfg)
	t.Setenv(pulumi.EnvConfig, string(env))
	err = pulumi.RunErr(prog, pulumi.WithMocks("lockplane", stack, m))
	return m, err
}

func strs(v resource.PropertyValue) []string {
	var out []string
	for _, e := range v.ArrayValue() {
		out = append(out, e.StringValue())
	}
	return out
}

// services are the Service resources of the service name.
func services(m *mocks, name string) []pulumi.MockResourceArgs {
	var out []pulumi.MockResourceArgs
	for _, r := range m.of("lockplane:nodes:Service") {
		if r.Inputs["name"].StringValue() == name {
			out = append(out, r)
		}
	}
	return out
}

func etcdCommands(m *mocks) map[string][]string {
	out := map[string][]string{}
	for _, r := range m.of("lockplane:nodes:Service") {
		if strings.HasPrefix(r.Inputs["name"].StringValue(), "etcd-") {
			out[r.Name] = strs(r.Inputs["command"])
		}
	}
	return out
}

func flag(cmd []string, name string) string {
	for i, a := range cmd {
		if a == name && i+1 < len(cmd) {
			return cmd[i+1]
		}
	}
	return ""
}

func TestEveryEtcdURLIsTLSAndFlagsComeFromConfig(t *testing.T) {
	m, err := run(t, "eu-west", nil)
	if err != nil {
		t.Fatal(err)
	}
	cmds := etcdCommands(m)
	if len(cmds) != 5+2*3 {
		t.Fatalf("%d etcd services, want 11 (coord 5, two shards of 3)", len(cmds))
	}
	for name, cmd := range cmds {
		for _, f := range []string{"--listen-client-urls", "--advertise-client-urls", "--listen-peer-urls", "--initial-advertise-peer-urls", "--initial-cluster"} {
			for _, u := range strings.Split(flag(cmd, f), ",") {
				if !strings.Contains(u, "https://") {
					t.Fatalf("%s: %s has a URL without TLS: %s", name, f, u)
				}
			}
		}
		joined := strings.Join(cmd, " ")
		for _, want := range []string{"--client-cert-auth", "--peer-client-cert-auth", "--heartbeat-interval 100", "--election-timeout 1000",
			"--quota-backend-bytes 8589934592", "--auto-compaction-mode periodic", "--auto-compaction-retention 1h",
			"LeaseCheckpoint=true,LeaseCheckpointPersist=true"} {
			if !strings.Contains(joined, want) {
				t.Fatalf("%s: %q missing from %s", name, want, joined)
			}
		}
	}
	// Each cluster's initial-cluster-token is its own ClusterToken's random
	// value, so a cluster made again gets a new cluster ID (ADR-03).
	tokens := map[string]map[string]bool{}
	for name, cmd := range cmds {
		cluster := "coord"
		if i := strings.Index(name, "-entity-"); i >= 0 {
			cluster = name[i+1 : i+9]
		}
		if tokens[cluster] == nil {
			tokens[cluster] = map[string]bool{}
		}
		tokens[cluster][flag(cmd, "--initial-cluster-token")] = true
	}
	seen := map[string]bool{}
	for cluster, toks := range tokens {
		for tok := range toks {
			if len(toks) != 1 || !strings.HasSuffix(tok, "-0123abcd") || seen[tok] {
				t.Fatalf("cluster %s: tokens %v (want one, from its ClusterToken, unlike the others')", cluster, toks)
			}
			seen[tok] = true
		}
	}
	if len(tokens) != 3 {
		t.Fatalf("tokens by cluster: %v", tokens)
	}
	// A tuning change reaches every member's flags.
	m, err = run(t, "eu-west", func(c map[string]string) {
		c["lockplane:etcd"] = `{"heartbeatMs":50,"electionMs":500,"quotaBytes":4294967296,"compactionPeriod":"30m","leaseCheckpoint":true}`
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, cmd := range etcdCommands(m) {
		if flag(cmd, "--heartbeat-interval") != "50" || flag(cmd, "--election-timeout") != "500" ||
			flag(cmd, "--quota-backend-bytes") != "4294967296" || flag(cmd, "--auto-compaction-retention") != "30m" {
			t.Fatalf("%s: tuning not applied: %v", name, cmd)
		}
	}
}

// Every etcd member waits for its host's fsync benchmark, which carries
// the stack's gate, and its host's LUKS volume binds to two Tang servers.
func TestEtcdIsGatedOnTheFsyncBenchmark(t *testing.T) {
	m, err := run(t, "eu-west", nil)
	if err != nil {
		t.Fatal(err)
	}
	bench := m.of("lockplane:nodes:FsyncBenchmark")
	if len(bench) != 11 {
		t.Fatalf("%d benchmarks, want one per etcd host (11)", len(bench))
	}
	for _, b := range bench {
		if b.Inputs["gateP99Ms"].NumberValue() != 10 || b.Inputs["sizeMiB"].NumberValue() != 22 {
			t.Fatalf("%s: gate %v size %v", b.Name, b.Inputs["gateP99Ms"], b.Inputs["sizeMiB"])
		}
	}
	for _, r := range m.of("lockplane:nodes:File") {
		if strings.HasSuffix(r.Name, "-etcd") {
			if !dependsOnSuffix(r, "-fsync") {
				t.Fatalf("%s does not wait for its host's fsync benchmark: %v", r.Name, r.RegisterRPC.GetDependencies())
			}
		}
	}
	for _, v := range m.of("lockplane:nodes:LuksVolume") {
		if n := len(v.Inputs["tang"].ArrayValue()); n != 2 || v.Inputs["threshold"].NumberValue() != 1 {
			t.Fatalf("%s: %d tang pins, threshold %v", v.Name, n, v.Inputs["threshold"])
		}
		// Production disks are opened and mounted as etcd's data disk.
		if v.Inputs["mountPoint"].StringValue() != "/var/lib/etcd" || v.Inputs["path"].StringValue() != "/dev/nvme1n1" {
			t.Fatalf("%s: device %v mounted at %v", v.Name, v.Inputs["path"], v.Inputs["mountPoint"])
		}
	}
}

func dependsOnSuffix(r pulumi.MockResourceArgs, suffix string) bool {
	for _, d := range r.RegisterRPC.GetDependencies() {
		if strings.HasSuffix(d, suffix) {
			return true
		}
	}
	return false
}

func TestKubernetesRuntimeSpreadsArbitersAndNeverRunsEtcd(t *testing.T) {
	m, err := run(t, "us-east", nil)
	if err != nil {
		t.Fatal(err)
	}
	deps := m.of("kubernetes:apps/v1:Deployment")
	if len(deps) != 1 {
		t.Fatalf("%d deployments", len(deps))
	}
	spec := deps[0].Inputs["spec"].ObjectValue()
	if spec["replicas"].NumberValue() != 3 {
		t.Fatalf("replicas %v", spec["replicas"])
	}
	pod := spec["template"].ObjectValue()["spec"].ObjectValue()
	tsc := pod["topologySpreadConstraints"].ArrayValue()
	if len(tsc) != 1 || tsc[0].ObjectValue()["topologyKey"].StringValue() != "topology.kubernetes.io/zone" ||
		tsc[0].ObjectValue()["whenUnsatisfiable"].StringValue() != "DoNotSchedule" || tsc[0].ObjectValue()["maxSkew"].NumberValue() != 1 {
		t.Fatalf("arbiter replicas are not spread across halls: %v", tsc)
	}
	if !strings.Contains(pod["affinity"].String(), "lock-etcd") {
		t.Fatalf("the arbiter may land on etcd nodes: %v", pod["affinity"])
	}
	if len(m.of("kubernetes:policy/v1:PodDisruptionBudget")) != 1 || len(m.of("kubernetes:core/v1:Service")) != 1 {
		t.Fatal("no PodDisruptionBudget or Service for the arbiter")
	}
	for _, r := range m.res {
		if strings.HasPrefix(r.TypeToken, "kubernetes:") && strings.Contains(strings.ToLower(fmt.Sprint(r.Inputs.Mappable())), "etcd:") {
			t.Fatalf("%s %s runs etcd on Kubernetes", r.TypeToken, r.Name)
		}
		if r.TypeToken == "kubernetes:apps/v1:StatefulSet" {
			t.Fatalf("a StatefulSet %s: etcd never runs on Kubernetes", r.Name)
		}
	}
	if n := len(etcdCommands(m)); n != 11 {
		t.Fatalf("%d etcd services on hosts, want 11", n)
	}
	for _, r := range m.of("lockplane:nodes:Service") {
		if r.Inputs["name"].StringValue() == "arbiter" {
			t.Fatalf("an arbiter host service under the kubernetes runtime: %s", r.Name)
		}
	}
}

func TestAnInvalidStackCreatesNothing(t *testing.T) {
	m, err := run(t, "eu-west", func(c map[string]string) { c["lockplane:halls"] = `["hall-1","hall-2"]` })
	if err == nil || !strings.Contains(err.Error(), "halls: 2 named") {
		t.Fatalf("want the halls refusal, got %v", err)
	}
	if len(m.res) != 0 {
		t.Fatalf("%d resources registered by a refused stack", len(m.res))
	}
}

// Each arbiter serves its stack's region and routes the entity tier to
// every entity shard of the stack, by name, over TLS.
func TestArbitersServeTheRegionAndRouteToEveryEntityShard(t *testing.T) {
	m, err := run(t, "eu-west", nil)
	if err != nil {
		t.Fatal(err)
	}
	arbiters := services(m, "arbiter")
	for _, r := range arbiters {
		cmd := strs(r.Inputs["command"])
		if flag(cmd, "--region") != "eu-west" {
			t.Fatalf("%s: --region %q, want eu-west", r.Name, flag(cmd, "--region"))
		}
		var shards []string
		for i, a := range cmd {
			if a == "--shard" && i+1 < len(cmd) {
				shards = append(shards, cmd[i+1])
			}
		}
		if len(shards) != 2 {
			t.Fatalf("%s routes to %d shards, want the stack's 2: %v", r.Name, len(shards), shards)
		}
		for i, sh := range shards {
			name, eps, _ := strings.Cut(sh, "=")
			if name != fmt.Sprintf("entity-%d", i) || len(strings.Split(eps, ",")) != 3 || !strings.HasPrefix(eps, "https://") {
				t.Fatalf("%s: --shard %s: want entity-%d=<three https endpoints>", r.Name, sh, i)
			}
		}
	}
	if len(arbiters) == 0 {
		t.Fatal("no arbiter services")
	}
}

// The stack's policy set is validated by the library the arbiter uses: an
// invalid class refuses the deploy before anything is created, and the
// arbiters get the files and serve them with --policies.
func TestPolicySetIsValidatedAndDelivered(t *testing.T) {
	m, err := run(t, "eu-west", nil)
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	for _, r := range m.of("lockplane:nodes:File") {
		if strings.Contains(r.Inputs["path"].StringValue(), "/etc/lockplane/policies/") {
			files++
		}
	}
	if files != 3*7 { // three arbiter hosts, seven policy files
		t.Fatalf("%d policy files on arbiter hosts, want 21", files)
	}
	for _, r := range m.of("lockplane:nodes:Service") {
		if r.Inputs["name"].StringValue() == "arbiter" && flag(strs(r.Inputs["command"]), "--policies") != "/etc/lockplane/policies" {
			t.Fatalf("%s does not serve the policy set: %v", r.Name, strs(r.Inputs["command"]))
		}
	}

	broken := t.TempDir()
	os.WriteFile(filepath.Join(broken, "c.yaml"), []byte("apiVersion: lockplane.io/v1\nkind: LockClass\nmetadata: {name: c}\n"+
		"spec: {namespace: a, purpose: correctness, enforcement: fenced, tier: coord}\n"), 0o644)
	m, err = run(t, "eu-west", func(c map[string]string) { c["lockplane:policies"] = broken })
	if err == nil || !strings.Contains(err.Error(), "spec.pauseTestResult: is required of a fenced class") || len(m.res) != 0 {
		t.Fatalf("an invalid class: %v (%d resources)", err, len(m.res))
	}

	foreign := t.TempDir()
	os.WriteFile(filepath.Join(foreign, "g.yaml"), []byte("apiVersion: lockplane.io/v1\nkind: LockGrant\nmetadata: {name: g}\n"+
		"spec: {spiffeId: \"spiffe://other.example/ns/a/sa/w\", prefixes: [a/]}\n"), 0o644)
	m, err = run(t, "eu-west", func(c map[string]string) { c["lockplane:policies"] = foreign })
	if err == nil || !strings.Contains(err.Error(), "is not in the stack's trust domain prod.example") || len(m.res) != 0 {
		t.Fatalf("a grant of another trust domain: %v", err)
	}

	// Kubernetes: the set as a ConfigMap mounted where --policies points.
	m, err = run(t, "us-east", nil)
	if err != nil {
		t.Fatal(err)
	}
	cms := m.of("kubernetes:core/v1:ConfigMap")
	if len(cms) != 1 || len(cms[0].Inputs["data"].ObjectValue()) != 7 {
		t.Fatalf("policy ConfigMap: %v", cms)
	}
}

// With an audit host (the local stack's audit-1), the region runs one
// ClickHouse server there, serving HTTP on the host's address to the
// arbiter hosts, and every arbiter tails into it; without one, no arbiter
// gets an audit store.
func TestArbitersGetTheAuditStoreWhenTheStackHasAnAuditHost(t *testing.T) {
	m, err := run(t, "local", localHosts)
	if err != nil {
		t.Fatal(err)
	}
	stores := services(m, "clickhouse")
	if len(stores) != 1 || stores[0].Inputs["connection"].ObjectValue()["host"].StringValue() != "10.231.0.23" {
		t.Fatalf("clickhouse services: %v; want one, on audit-1", stores)
	}
	cmd := strs(stores[0].Inputs["command"])
	if cmd[0] != "/usr/sbin/clickhouse-server" || !strings.HasPrefix(cmd[1], "--config-file=") || !strings.HasSuffix(cmd[1], "audit-1/root/etc/lockplane/clickhouse/config.xml") {
		t.Fatalf("clickhouse command %v", cmd)
	}
	if len(strs(stores[0].Inputs["triggers"])) != 2 || !dependsOnSuffix(stores[0], "-config.xml") || !dependsOnSuffix(stores[0], "-users.xml") {
		t.Fatalf("clickhouse does not restart on its configuration: %v", stores[0].Inputs["triggers"])
	}
	for _, r := range m.of("lockplane:nodes:File") {
		content := r.Inputs["content"]
		switch {
		case strings.HasSuffix(r.Inputs["path"].StringValue(), "/clickhouse/config.xml"):
			if !strings.Contains(content.StringValue(), "<listen_host>10.231.0.23</listen_host>") || !strings.Contains(content.StringValue(), "<http_port>8123</http_port>") ||
				strings.Contains(content.StringValue(), "<tcp_port>") {
				t.Fatalf("clickhouse config: %s", content.StringValue())
			}
		case strings.HasSuffix(r.Inputs["path"].StringValue(), "/clickhouse/users.xml"):
			if !content.IsSecret() || !strings.Contains(content.SecretValue().Element.StringValue(), "<ip>10.231.0.21</ip><ip>10.231.0.22</ip>") {
				t.Fatalf("clickhouse users are not secret or do not let the arbiter hosts in: %v", content)
			}
		}
	}
	arbiters := services(m, "arbiter")
	for _, r := range arbiters {
		cmd := strs(r.Inputs["command"])
		if flag(cmd, "--audit-store") != "http://10.231.0.23:8123" || flag(cmd, "--audit-database") != "lockplane" {
			t.Fatalf("%s: --audit-store %q --audit-database %q", r.Name, flag(cmd, "--audit-store"), flag(cmd, "--audit-database"))
		}
		if !dependsOnSuffix(r, "-audit-audit-1-service") {
			t.Fatalf("%s starts before the audit store: %v", r.Name, r.RegisterRPC.GetDependencies())
		}
	}
	if len(arbiters) != 2 {
		t.Fatalf("%d arbiter services, want 2", len(arbiters))
	}
	stores = nil
	for _, r := range m.res {
		if r.TypeToken == "lockplane:infra:AuditStore" {
			stores = append(stores, r)
		}
	}
	if len(stores) != 1 {
		t.Fatalf("%d AuditStore components, want 1", len(stores))
	}

	// No audit host, or audit.enabled false: no store, no flag.
	for stack, edit := range map[string]func(map[string]string){
		"eu-west": nil,
		"us-east": nil,
		"local": func(c map[string]string) {
			localHosts(c)
			c["lockplane:audit"], c["lockplane:archive"] = `{"enabled":false}`, `{"enabled":false}`
		},
	} {
		m, err := run(t, stack, edit)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range m.res {
			if r.TypeToken == "lockplane:infra:AuditStore" || strings.Contains(fmt.Sprint(r.Inputs.Mappable()), "--audit-store") {
				t.Fatalf("%s: %s %s without an audit host", stack, r.TypeToken, r.Name)
			}
		}
	}

	// The kubernetes runtime: the deployment's arbiters get the flag too.
	m, err = run(t, "us-east", usEastWithAudit)
	if err != nil {
		t.Fatal(err)
	}
	// A rotated password rolls the pods: their template's credentials
	// digest changes with it.
	rotated, err := run(t, "us-east", func(c map[string]string) {
		usEastWithAudit(c)
		c["lockplane:auditWriterPassword"] = "a-rotated-writer-password"
	})
	if err != nil {
		t.Fatal(err)
	}
	digestOf := func(m *mocks) string {
		d := m.of("kubernetes:apps/v1:Deployment")
		if len(d) != 1 {
			t.Fatalf("%d deployments", len(d))
		}
		v := d[0].Inputs["spec"].ObjectValue()["template"].ObjectValue()["metadata"].ObjectValue()["annotations"].ObjectValue()["lockplane.io/credentials-sha256"]
		if v.IsSecret() {
			v = v.SecretValue().Element
		}
		return v.StringValue()
	}
	if a, b := digestOf(m), digestOf(rotated); len(a) != 64 || a == b {
		t.Fatalf("credentials digest %q before and %q after a rotation: want a change", a, b)
	}
	deps := m.of("kubernetes:apps/v1:Deployment")
	if len(deps) != 1 || !strings.Contains(fmt.Sprint(deps[0].Inputs.Mappable()), "--audit-store http://10.9.9.9:8123") {
		t.Fatalf("the kubernetes arbiters do not get the audit store: %v", deps)
	}
	if !strings.Contains(fmt.Sprint(deps[0].Inputs.Mappable()), "--audit-credentials /etc/lockplane/arbiter/audit-credentials") {
		t.Fatalf("the kubernetes arbiters do not get --audit-credentials: %v", deps[0].Inputs.Mappable())
	}
	secrets := m.of("kubernetes:core/v1:Secret")
	if len(secrets) != 1 || !secrets[0].Inputs["stringData"].IsSecret() ||
		!strings.Contains(fmt.Sprint(secrets[0].Inputs["stringData"].SecretValue().Element.Mappable()), "audit-credentials:writer lockplane:generated-") {
		t.Fatalf("the arbiters' Secret lacks a secret audit-credentials: %v", secrets)
	}
	for _, r := range m.res {
		for _, s := range plainStrings(resource.NewObjectProperty(r.Inputs)) {
			if strings.Contains(s, "generated-") {
				t.Fatalf("kubernetes: %s %s has a password in a plain input: %q", r.TypeToken, r.Name, s)
			}
		}
	}
}

// The audit store's passwords: made once at random (Password resources)
// or given as secure configuration; hashed in users.xml, whole in each
// arbiter host's --audit-credentials file (0600, secret), and in no plain
// input of any resource: not a command line, not a Kubernetes Deployment.
func TestAuditPasswordsAreSecretAndReachTheArbiters(t *testing.T) {
	const configured = "configured-writer-password"
	for name, edit := range map[string]func(map[string]string){
		"generated": localHosts,
		"configured writer": func(c map[string]string) {
			localHosts(c)
			c["lockplane:auditWriterPassword"] = configured
		},
	} {
		m, err := run(t, "local", edit)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var pws []string
		for _, r := range m.of("lockplane:nodes:Password") {
			if strings.Contains(r.Name, "-audit-") { // not the archive's
				pws = append(pws, mockPassword(r.Name))
			}
		}
		writer, reader := mockPassword("local-audit-audit-1-writer-password"), mockPassword("local-audit-audit-1-reader-password")
		if want := 2 - strings.Count(name, "configured"); len(pws) != want {
			t.Fatalf("%s: made passwords %v; want %d", name, pws, want)
		}
		if name == "configured writer" {
			writer = configured
			pws = append(pws, configured)
		}
		creds := map[string]string{}
		for _, r := range m.of("lockplane:nodes:File") {
			path, content := r.Inputs["path"].StringValue(), r.Inputs["content"]
			switch {
			case strings.HasSuffix(path, "/clickhouse/users.xml"):
				u := content.SecretValue().Element.StringValue()
				for _, p := range []string{writer, reader} {
					if !strings.Contains(u, "<password_sha256_hex>"+chserver.PasswordSHA256(p)+"</password_sha256_hex>") {
						t.Errorf("%s: users.xml lacks a password's hash:\n%s", name, u)
					}
				}
				if r.Inputs["mode"].StringValue() != "0600" {
					t.Errorf("%s: users.xml mode %s", name, r.Inputs["mode"].StringValue())
				}
			case strings.HasSuffix(path, "/etc/lockplane/arbiter/audit-credentials"):
				if !content.IsSecret() || r.Inputs["mode"].StringValue() != "0600" {
					t.Fatalf("%s: %s is not secret and 0600: %v %v", name, path, content.IsSecret(), r.Inputs["mode"])
				}
				creds[path] = content.SecretValue().Element.StringValue()
			}
		}
		if len(creds) != 2 {
			t.Fatalf("%s: credentials files %v; want one per arbiter host", name, creds)
		}
		for path, c := range creds {
			if c != components.AuditCredentials(writer, reader) {
				t.Errorf("%s: %s holds %q", name, path, c)
			}
		}
		for _, r := range services(m, "arbiter") {
			cmd := strs(r.Inputs["command"])
			if _, ok := creds[flag(cmd, "--audit-credentials")]; !ok {
				t.Errorf("%s: %s: --audit-credentials %q is not its file", name, r.Name, flag(cmd, "--audit-credentials"))
			}
			if !dependsOnSuffix(r, "-audit-credentials") {
				t.Errorf("%s: %s starts before its credentials file", name, r.Name)
			}
		}
		for _, r := range m.res {
			for _, s := range plainStrings(resource.NewObjectProperty(r.Inputs)) {
				for _, p := range pws {
					if strings.Contains(s, p) {
						t.Fatalf("%s: %s %s has a password in a plain input: %q", name, r.TypeToken, r.Name, s)
					}
				}
			}
		}
	}
	// A configured password that breaks the rule stops the program, named.
	// A password in the stack file in plain text is refused, naming it.
	_, err := run(t, "local", func(c map[string]string) {
		localHosts(c)
		c["lockplane:archivePassword"], c[plainSecrets] = "a-plain-password-of-length", "1"
	})
	if err == nil || !strings.Contains(err.Error(), "lockplane:archivePassword: stored in plain text") || strings.Contains(err.Error(), "a-plain-password") {
		t.Fatalf("a plain-text password: %v", err)
	}
	_, err = run(t, "local", func(c map[string]string) { localHosts(c); c["lockplane:auditReaderPassword"] = "short" })
	if err == nil || !strings.Contains(err.Error(), "lockplane:auditReaderPassword: must be at least 16 characters") || strings.Contains(err.Error(), "short") {
		t.Fatalf("a short configured password: %v", err)
	}
}

// plainStrings are the strings in v that are not inside a secret.
func plainStrings(v resource.PropertyValue) []string {
	switch {
	case v.IsSecret():
		return nil
	case v.IsString():
		return []string{v.StringValue()}
	case v.IsArray():
		var out []string
		for _, e := range v.ArrayValue() {
			out = append(out, plainStrings(e)...)
		}
		return out
	case v.IsObject():
		var out []string
		for _, e := range v.ObjectValue() {
			out = append(out, plainStrings(e)...)
		}
		return out
	}
	return nil
}

// With an archive host (the local stack's archive-1), the region runs one
// MinIO server there over TLS, its root password a secret that reaches
// only it (by file) and the ArchiveBuckets resource that sets up the
// buckets and the archiver user; every arbiter is given the archive as
// that archiver, never as root.
func TestArbitersGetTheArchiveWhenTheStackHasAnArchiveHost(t *testing.T) {
	m, err := run(t, "local", localHosts)
	if err != nil {
		t.Fatal(err)
	}
	minio := services(m, "minio")
	if len(minio) != 1 || minio[0].Inputs["connection"].ObjectValue()["host"].StringValue() != "10.231.0.24" {
		t.Fatalf("minio services: %v; want one, on archive-1", minio)
	}
	cmd := strs(minio[0].Inputs["command"])
	if !strings.HasSuffix(cmd[0], "archive-1/root/opt/lockplane/bin/minio") || flag(cmd, "--address") != "10.231.0.24:9000" ||
		!strings.HasSuffix(flag(cmd, "--certs-dir"), "/etc/lockplane/minio/certs") {
		t.Fatalf("minio command %v", cmd)
	}
	env := minio[0].Inputs["env"].ObjectValue()
	if !strings.HasSuffix(env["MINIO_ROOT_PASSWORD_FILE"].StringValue(), "/etc/lockplane/minio/root-password") || env["MINIO_ROOT_PASSWORD"].HasValue() {
		t.Fatalf("minio's password is not given by file: %v", env)
	}
	rootPassword := mockPassword("local-archive-archive-1-root-password")
	archiverPassword := mockPassword("local-archive-archive-1-archiver-password")
	secretFiles := map[string]bool{}
	for _, r := range m.of("lockplane:nodes:File") {
		path := r.Inputs["path"].StringValue()
		content := ""
		if c := r.Inputs["content"]; c.IsSecret() {
			content = c.SecretValue().Element.StringValue()
		} else if c.IsString() {
			content = c.StringValue()
		}
		// Root's password is in one file: MinIO's, on archive-1.
		if strings.Contains(content, rootPassword) != strings.HasSuffix(path, "archive-1/root/etc/lockplane/minio/root-password") {
			t.Fatalf("%s holds root's password: %v", path, strings.Contains(content, rootPassword))
		}
		if strings.HasSuffix(path, "/minio/root-password") || strings.HasSuffix(path, "/arbiter/archive-credentials") || strings.HasSuffix(path, "/minio/certs/private.key") {
			// The mocks keep a certificate's key plain; the password stays
			// a secret through every file made of it.
			secret := r.Inputs["content"].IsSecret() || strings.HasSuffix(path, "/private.key")
			if !secret || r.Inputs["mode"].StringValue() != "0600" {
				t.Fatalf("%s: secret %v, mode %s; want a secret of mode 0600", path, r.Inputs["content"].IsSecret(), r.Inputs["mode"].StringValue())
			}
			secretFiles[path[strings.LastIndex(path, "/")+1:]] = true
		}
		if strings.HasSuffix(path, "/arbiter/archive-credentials") && content != "archive lockplane-archiver:"+archiverPassword+"\n" {
			t.Fatalf("%s: %q; want the archiver's credentials", path, content)
		}
	}
	if len(secretFiles) != 3 {
		t.Fatalf("secret files %v, want the root password, the key and the arbiters' credentials", secretFiles)
	}
	// The buckets and the archiver are set up by root at deploy time,
	// once MinIO runs, over TLS with the archive's CA.
	buckets := m.of("lockplane:nodes:ArchiveBuckets")
	if len(buckets) != 1 {
		t.Fatalf("%d ArchiveBuckets, want 1", len(buckets))
	}
	b := buckets[0].Inputs
	if b["url"].StringValue() != "https://10.231.0.24:9000" || b["caCertPem"].StringValue() == "" || b["rootUser"].StringValue() != "lockplane" ||
		!b["rootPassword"].IsSecret() || b["rootPassword"].SecretValue().Element.StringValue() != rootPassword ||
		b["user"].StringValue() != "lockplane-archiver" || !b["password"].IsSecret() || b["password"].SecretValue().Element.StringValue() != archiverPassword ||
		b["historyBucket"].StringValue() != "lockplane-history" || b["recordsBucket"].StringValue() != "lockplane-records" ||
		b["recordsMode"].StringValue() != "GOVERNANCE" || b["recordsYears"].NumberValue() != 7 || b["historyDays"].NumberValue() != 365 {
		t.Fatalf("ArchiveBuckets inputs %v", b)
	}
	if !dependsOnSuffix(buckets[0], "-archive-archive-1-service") {
		t.Fatalf("ArchiveBuckets before MinIO runs: %v", buckets[0].RegisterRPC.GetDependencies())
	}
	arbiters := services(m, "arbiter")
	for _, r := range arbiters {
		cmd := strs(r.Inputs["command"])
		if flag(cmd, "--archive") != "https://10.231.0.24:9000" || !strings.HasSuffix(flag(cmd, "--archive-credentials"), "/arbiter/archive-credentials") ||
			!strings.HasSuffix(flag(cmd, "--archive-ca"), "/arbiter/archive-ca.crt") || flag(cmd, "--archive-records-mode") != "GOVERNANCE" {
			t.Fatalf("%s: archive flags of %v", r.Name, cmd)
		}
		if !dependsOnSuffix(r, "-archive-archive-1-service") || !dependsOnSuffix(r, "-archive-archive-1-buckets") {
			t.Fatalf("%s starts before the archive and its archiver: %v", r.Name, r.RegisterRPC.GetDependencies())
		}
		if flag(cmd, "--archive-history-bucket") != "lockplane-history" || flag(cmd, "--archive-records-bucket") != "lockplane-records" {
			t.Fatalf("%s: archive buckets of %v", r.Name, cmd)
		}
	}
	if len(arbiters) != 2 {
		t.Fatalf("%d arbiter services, want 2", len(arbiters))
	}
	// Nothing of the password in plain sight: not in a command line, an
	// environment or the component's outputs.
	for _, r := range m.res {
		if r.TypeToken == "lockplane:nodes:Password" {
			continue
		}
		for k, v := range r.Inputs {
			if (k == "command" || k == "env") && (strings.Contains(fmt.Sprint(v), rootPassword) || strings.Contains(fmt.Sprint(v), archiverPassword)) {
				t.Fatalf("%s %s: the password is in its %s", r.TypeToken, r.Name, k)
			}
		}
	}

	// archive.enabled false: no MinIO, no flag.
	m, err = run(t, "local", func(c map[string]string) { localHosts(c); c["lockplane:archive"] = `{"enabled":false}` })
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range m.res {
		if r.TypeToken == "lockplane:infra:Archive" || strings.Contains(fmt.Sprint(r.Inputs.Mappable()), "--archive ") {
			t.Fatalf("%s %s with the archive off", r.TypeToken, r.Name)
		}
	}
}

// localHosts lets the program run the local stack without its test hosts:
// their known_hosts file is made by test/hosts.
func localHosts(c map[string]string) {
	var s map[string]any
	json.Unmarshal([]byte(c["lockplane:ssh"]), &s)
	delete(s, "knownHostsFile")
	s["trustOnFirstUse"] = true
	b, _ := json.Marshal(s)
	c["lockplane:ssh"] = string(b)
}
