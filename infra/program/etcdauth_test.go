package program_test

import (
	"fmt"
	"github.com/lockplane/lockplane/services/etcdauth"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/lockplane/lockplane/infra/components"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// secretString is v's string if v is a secret, and whether it was one.
func secretString(v resource.PropertyValue) (string, bool) {
	if !v.IsSecret() {
		return "", false
	}
	return v.SecretValue().Element.StringValue(), true
}

// etcdPasswords are the region's etcd users' passwords the mocks make.
func etcdPasswords(region string) map[string]string {
	out := map[string]string{}
	for _, u := range []string{"root", "arbiter", "admin", "tailer"} {
		out[u] = mockPassword(region + "-etcd-" + u + "-password")
	}
	return out
}

// Every cluster of a region (coord and each entity shard) gets an EtcdAuth:
// after the cluster's epoch bootstrap (the coord cluster's after every
// bootstrap, as each writes there), before any arbiter starts, with one set
// of passwords for the region, each a secret. The bootstrap signs in as
// root.
func TestEveryClusterGetsEtcdAuthBeforeTheArbiters(t *testing.T) {
	m, err := run(t, "eu-west", nil)
	if err != nil {
		t.Fatal(err)
	}
	pw := etcdPasswords("eu-west")
	made := map[string]bool{}
	for _, r := range m.of("lockplane:nodes:Password") {
		if strings.HasPrefix(r.Name, "eu-west-etcd-") {
			made[mockPassword(r.Name)] = true
		}
	}
	for u, p := range pw {
		if !made[p] {
			t.Fatalf("no Password made for etcd user %s: %v", u, made)
		}
	}
	epochs := map[string]pulumi.MockResourceArgs{}
	for _, e := range m.of("lockplane:nodes:EtcdEpoch") {
		epochs[e.Inputs["cluster"].StringValue()] = e
		if got, ok := secretString(e.Inputs["rootPassword"]); !ok || got != pw["root"] {
			t.Fatalf("%s: rootPassword %v; want root's, secret", e.Name, e.Inputs["rootPassword"])
		}
	}
	auths := m.of("lockplane:nodes:EtcdAuth")
	if len(auths) != 3 || len(epochs) != 3 {
		t.Fatalf("%d EtcdAuth, %d EtcdEpoch; want one each per cluster (coord, entity-0, entity-1)", len(auths), len(epochs))
	}
	seen := map[string]bool{}
	for _, a := range auths {
		cluster := strings.TrimSuffix(strings.TrimPrefix(a.Name, "eu-west-"), "-auth")
		e, ok := epochs[cluster]
		if !ok || seen[cluster] {
			t.Fatalf("%s: no cluster %q, or a second EtcdAuth for it", a.Name, cluster)
		}
		seen[cluster] = true
		if got, want := strs(a.Inputs["endpoints"]), strs(e.Inputs["endpoints"]); !slices.Equal(got, want) || len(got) == 0 {
			t.Fatalf("%s: endpoints %v; want the cluster's %v", a.Name, got, want)
		}
		if a.Inputs["certPem"].StringValue() != "CERT eu-west-"+cluster+"-deployer" {
			t.Fatalf("%s: signs in with %v; want the cluster's deployer certificate", a.Name, a.Inputs["certPem"])
		}
		for u, p := range pw {
			if got, ok := secretString(a.Inputs[resource.PropertyKey(u+"Password")]); !ok || got != p {
				t.Fatalf("%s: %sPassword %v; want the region's, secret", a.Name, u, a.Inputs[resource.PropertyKey(u+"Password")])
			}
		}
		if !dependsOnSuffix(a, "eu-west-"+cluster+"-epoch") {
			t.Fatalf("%s runs before its cluster's epoch bootstrap: %v", a.Name, a.RegisterRPC.GetDependencies())
		}
		if cluster == "coord" {
			for c := range epochs {
				if !dependsOnSuffix(a, "eu-west-"+c+"-epoch") {
					t.Fatalf("the coord cluster's EtcdAuth runs before %s's bootstrap, which writes there: %v", c, a.RegisterRPC.GetDependencies())
				}
			}
		}
	}
	arbiters := services(m, "arbiter")
	if len(arbiters) != 3 {
		t.Fatalf("%d arbiters", len(arbiters))
	}
	for _, r := range arbiters {
		for c := range epochs {
			if !dependsOnSuffix(r, "eu-west-"+c+"-auth") {
				t.Fatalf("%s starts before %s has its etcd users: %v", r.Name, c, r.RegisterRPC.GetDependencies())
			}
		}
	}

	// Configured passwords are taken instead of made, checked by the same
	// rule as the audit's, and refused in plain text.
	const configured = "configured-arbiter-etcd-password"
	m, err = run(t, "eu-west", func(c map[string]string) { c["lockplane:etcdArbiterPassword"] = configured })
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range m.of("lockplane:nodes:Password") {
		if r.Name == "eu-west-etcd-arbiter-password" {
			t.Fatal("a Password made for a configured etcdArbiterPassword")
		}
	}
	for _, a := range m.of("lockplane:nodes:EtcdAuth") {
		if got, _ := secretString(a.Inputs["arbiterPassword"]); got != configured {
			t.Fatalf("%s: arbiterPassword %q; want the configured one", a.Name, got)
		}
	}
	_, err = run(t, "eu-west", func(c map[string]string) { c["lockplane:etcdAdminPassword"] = "short" })
	if err == nil || !strings.Contains(err.Error(), "lockplane:etcdAdminPassword: must be at least 16 characters") || strings.Contains(err.Error(), "short") {
		t.Fatalf("a short etcdAdminPassword: %v", err)
	}
	_, err = run(t, "eu-west", func(c map[string]string) {
		c["lockplane:etcdRootPassword"], c[plainSecrets] = "a-plain-root-password", "1"
	})
	if err == nil || !strings.Contains(err.Error(), "lockplane:etcdRootPassword: stored in plain text") {
		t.Fatalf("a plain-text etcdRootPassword: %v", err)
	}
}

// Every arbiter host gets an --etcd-credentials file (0600, a secret) with
// the arbiter, admin and tailer users, never root, and the arbiter's flags
// name it instead of --etcd-without-auth; no etcd password is in a plain
// input of any resource. Under the kubernetes runtime the file is a key of
// the arbiters' Secret (mounted 0400).
func TestArbitersSignInToEtcdWithTheirCredentialsFile(t *testing.T) {
	m, err := run(t, "local", localHosts)
	if err != nil {
		t.Fatal(err)
	}
	pw := etcdPasswords("local")
	want := components.EtcdCredentials(pw["arbiter"], pw["admin"], pw["tailer"])
	files := map[string]string{}
	for _, r := range m.of("lockplane:nodes:File") {
		p := r.Inputs["path"].StringValue()
		if path.Base(p) != "etcd-credentials" {
			continue
		}
		content, secret := secretString(r.Inputs["content"])
		if !secret || r.Inputs["mode"].StringValue() != "0600" {
			t.Fatalf("%s: secret %v, mode %s; want a secret of mode 0600", p, secret, r.Inputs["mode"].StringValue())
		}
		if content != want || strings.Contains(content, pw["root"]) {
			t.Fatalf("%s holds %q; want %q", p, content, want)
		}
		files[p] = content
	}
	arbiters := services(m, "arbiter")
	if len(arbiters) != 2 || len(files) != 2 {
		t.Fatalf("%d arbiters, credentials files %v; want one on each arbiter host", len(arbiters), files)
	}
	for _, r := range arbiters {
		cmd := strs(r.Inputs["command"])
		if slices.Contains(cmd, "--etcd-without-auth") {
			t.Fatalf("%s runs with --etcd-without-auth: %v", r.Name, cmd)
		}
		f := flag(cmd, "--etcd-credentials")
		if _, ok := files[f]; !ok || !strings.HasSuffix(f, "/etc/lockplane/arbiter/etcd-credentials") {
			t.Fatalf("%s: --etcd-credentials %q is not its file (%v)", r.Name, f, files)
		}
		if path.Dir(f) != path.Dir(flag(cmd, "--etcd-cert")) {
			t.Fatalf("%s: the credentials file %s is not beside the etcd certificate %s", r.Name, f, flag(cmd, "--etcd-cert"))
		}
		if !dependsOnSuffix(r, "-etcd-credentials") {
			t.Fatalf("%s starts before its credentials file: %v", r.Name, r.RegisterRPC.GetDependencies())
		}
	}
	noPlainEtcdPasswords(t, m, pw)

	// The kubernetes runtime: the Secret's etcd-credentials key, the flag.
	m, err = run(t, "us-east", nil)
	if err != nil {
		t.Fatal(err)
	}
	pw = etcdPasswords("us-east")
	secrets := m.of("kubernetes:core/v1:Secret")
	if len(secrets) != 1 || !secrets[0].Inputs["stringData"].IsSecret() {
		t.Fatalf("the arbiters' Secret: %v", secrets)
	}
	data := secrets[0].Inputs["stringData"].SecretValue().Element.ObjectValue()
	if got := data["etcd-credentials"]; !got.IsString() || got.StringValue() != components.EtcdCredentials(pw["arbiter"], pw["admin"], pw["tailer"]) {
		t.Fatalf("the Secret's etcd-credentials: %v", got)
	}
	deps := m.of("kubernetes:apps/v1:Deployment")
	if len(deps) != 1 {
		t.Fatalf("%d deployments", len(deps))
	}
	args := fmt.Sprint(deps[0].Inputs.Mappable())
	if !strings.Contains(args, "--etcd-credentials /etc/lockplane/arbiter/etcd-credentials") || strings.Contains(args, "--etcd-without-auth") {
		t.Fatalf("the kubernetes arbiters' args: %s", args)
	}
	if !strings.Contains(args, "defaultMode:256") { // 0400
		t.Fatalf("the credentials volume is not mounted 0400: %s", args)
	}
	for _, c := range []string{"coord", "entity-0"} {
		if !dependsOnSuffix(deps[0], "us-east-"+c+"-auth") {
			t.Fatalf("the deployment starts before %s has its etcd users: %v", c, deps[0].RegisterRPC.GetDependencies())
		}
	}
	noPlainEtcdPasswords(t, m, pw)
}

func noPlainEtcdPasswords(t *testing.T, m *mocks, pw map[string]string) {
	t.Helper()
	for _, r := range m.res {
		if r.TypeToken == "lockplane:nodes:Password" {
			continue
		}
		for _, s := range plainStrings(resource.NewObjectProperty(r.Inputs)) {
			for u, p := range pw {
				if strings.Contains(s, p) {
					t.Fatalf("%s %s has etcd's %s password in a plain input: %q", r.TypeToken, r.Name, u, s)
				}
			}
		}
	}
}

// Every member runs --auth-token jwt (ES256) with its cluster's key pair:
// one EtcdAuthTokenKey per cluster, the same files on every member of it,
// each 0600 and the private key a secret, and a member restarts when they
// change.
func TestEtcdMembersSignAuthTokensWithTheirClustersKey(t *testing.T) {
	m, err := run(t, "eu-west", nil)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{} // cluster name -> key resource name
	for _, k := range m.of("lockplane:nodes:EtcdAuthTokenKey") {
		keys[strings.TrimPrefix(k.Inputs["cluster"].StringValue(), "eu-west-")] = k.Name
	}
	if len(keys) != 3 {
		t.Fatalf("auth token keys %v; want one per cluster", keys)
	}
	files := map[string]pulumi.MockResourceArgs{} // by host and path
	for _, r := range m.of("lockplane:nodes:File") {
		files[r.Inputs["connection"].ObjectValue()["host"].StringValue()+":"+r.Inputs["path"].StringValue()] = r
	}
	cmds := etcdCommands(m)
	if len(cmds) != 11 {
		t.Fatalf("%d etcd members", len(cmds))
	}
	for name, cmd := range cmds {
		tok := flag(cmd, "--auth-token")
		opts := map[string]string{}
		kind, rest, _ := strings.Cut(tok, ",")
		for _, o := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(o, "=")
			opts[k] = v
		}
		if kind != "jwt" || opts["sign-method"] != "HS256" || opts["ttl"] != etcdauth.TokenTTL.String() || opts["priv-key"] == "" {
			t.Fatalf("%s: --auth-token %q", name, tok)
		}
		cluster := path.Base(path.Dir(opts["priv-key"]))
		if !strings.HasPrefix(name, "eu-west-"+cluster+"-") || keys[cluster] == "" {
			t.Fatalf("%s: its key %s is not its cluster's", name, opts["priv-key"])
		}
		host := strings.Split(strings.TrimPrefix(flag(cmd, "--listen-client-urls"), "https://"), ":")[0]
		priv := files[host+":"+opts["priv-key"]]
		if priv.Name == "" {
			t.Fatalf("%s: no file put on its host %s at %s", name, host, opts["priv-key"])
		}
		if content, secret := secretString(priv.Inputs["content"]); !secret || content != "PRIVATE KEY "+keys[cluster] || priv.Inputs["mode"].StringValue() != "0600" {
			t.Fatalf("%s: %s: secret %v, mode %s; want its cluster's private key, secret, 0600", name, opts["priv-key"], secret, priv.Inputs["mode"].StringValue())
		}
	}
	for _, r := range m.of("lockplane:nodes:Service") {
		if strings.HasPrefix(r.Inputs["name"].StringValue(), "etcd-") && !dependsOnSuffix(r, "-auth-token.key") {
			t.Fatalf("%s starts before its auth token key files: %v", r.Name, r.RegisterRPC.GetDependencies())
		}
	}
}
