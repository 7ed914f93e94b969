package program_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// With a spire host (the local stack's app-1), the region runs the SPIRE
// server there and an agent on every arbiter and workload host; each
// arbiter takes its SVID from its own host's agent (no SVID file is
// written for it), and the entries are the arbiter's on the arbiter
// hosts' agents and the demo grant's workload on app-1's.
func TestSpireIssuesTheArbitersAndGrantedWorkloadsIdentities(t *testing.T) {
	m, err := run(t, "local", localHosts)
	if err != nil {
		t.Fatal(err)
	}
	servers := services(m, "spire-server")
	if len(servers) != 1 || servers[0].Inputs["connection"].ObjectValue()["host"].StringValue() != "10.231.0.25" {
		t.Fatalf("spire servers: %v; want one, on app-1", servers)
	}
	agents := map[string]bool{}
	for _, a := range services(m, "spire-agent") {
		agents[a.Inputs["connection"].ObjectValue()["host"].StringValue()] = true
	}
	if len(agents) != 3 || !agents["10.231.0.21"] || !agents["10.231.0.22"] || !agents["10.231.0.25"] {
		t.Fatalf("spire agents on %v; want arbiter-1, arbiter-2 and app-1", agents)
	}
	for _, a := range services(m, "arbiter") {
		cmd := strs(a.Inputs["command"])
		host := a.Inputs["connection"].ObjectValue()["host"].StringValue()
		name := map[string]string{"10.231.0.21": "arbiter-1", "10.231.0.22": "arbiter-2"}[host]
		if sock := flag(cmd, "--spiffe-socket"); !strings.HasSuffix(sock, name+"/root/run/spire/agent/public/api.sock") || !strings.HasPrefix(sock, "unix:///") {
			t.Fatalf("arbiter on %s: --spiffe-socket %q; want its own host's agent", host, sock)
		}
		if flag(cmd, "--svid-cert") != "" || flag(cmd, "--bundle") != "" {
			t.Fatalf("arbiter on %s is also given SVID files: %v", host, cmd)
		}
	}
	var conf string
	for _, f := range m.of("lockplane:nodes:File") {
		p := f.Inputs["path"].StringValue()
		if strings.Contains(p, "/etc/lockplane/arbiter/svid") {
			t.Fatalf("an arbiter SVID file is written with SPIRE on: %s", p)
		}
		if strings.HasSuffix(p, "app-1/root/etc/lockplane/spire/server.conf") {
			conf = f.Inputs["content"].StringValue()
		}
	}
	for _, want := range []string{`trust_domain = "local.lockplane.test"`, `bind_address = "10.231.0.25"`, `bind_port = "8081"`,
		`default_x509_svid_ttl = "1h0m0s"`, `ca_ttl = "24h0m0s"`, `database_type = "sqlite3"`, `UpstreamAuthority "disk"`, `NodeAttestor "x509pop"`} {
		if !strings.Contains(conf, want) {
			t.Fatalf("server.conf lacks %s:\n%s", want, conf)
		}
	}
	entries := m.of("lockplane:nodes:SpireEntries")
	if len(entries) != 1 {
		t.Fatalf("%d SpireEntries, want 1", len(entries))
	}
	got := map[string]bool{}
	for _, e := range entries[0].Inputs["entries"].ArrayValue() {
		o := e.ObjectValue()
		got[o["spiffeId"].StringValue()+" <- "+o["parentId"].StringValue()+" "+strings.Join(strs(o["selectors"]), ",")+" "+o["x509SvidTtl"].String()] = true
	}
	td := "spiffe://local.lockplane.test"
	hostsRoot, _ := filepath.Abs(filepath.Join(".lockplane", "hosts")) // the stack's host roots, from the test's directory
	binDir := hostsRoot
	for _, want := range []string{
		td + "/lockplane/arbiter <- " + td + "/spire/agent/x509pop/arbiter-1 unix:path:" + binDir + "/arbiter-1/root/opt/lockplane/bin/arbiter,unix:uid:0 {3600}",
		td + "/lockplane/arbiter <- " + td + "/spire/agent/x509pop/arbiter-2 unix:path:" + binDir + "/arbiter-2/root/opt/lockplane/bin/arbiter,unix:uid:0 {3600}",
		td + "/ns/demo/sa/lockctl <- " + td + "/spire/agent/x509pop/app-1 unix:uid:0 {3600}",
	} {
		found := false
		for g := range got {
			found = found || strings.HasPrefix(g, want)
		}
		if !found {
			t.Fatalf("no entry %s in %v", want, got)
		}
	}
	if len(got) != 3 {
		t.Fatalf("entries %v; want the two arbiters' and the demo grant's", got)
	}
}

// A PostgreSQL datastore's connection string is a secret: the server's
// configuration that holds it is one.
func TestSpirePostgresDatastoreStaysSecret(t *testing.T) {
	dsn := filepath.Join(t.TempDir(), "spire-dsn")
	os.WriteFile(dsn, []byte("postgres://spire:a-db-password@db.example:5432/spire\n"), 0o600)
	m, err := run(t, "local", func(c map[string]string) {
		localHosts(c)
		c["lockplane:spire"] = `{"postgresFile":"` + dsn + `"}`
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range m.of("lockplane:nodes:File") {
		c := f.Inputs["content"]
		if !strings.HasSuffix(f.Inputs["path"].StringValue(), "/spire/server.conf") {
			if c.IsString() && strings.Contains(c.StringValue(), "a-db-password") {
				t.Fatalf("%s holds the datastore's password", f.Inputs["path"].StringValue())
			}
			continue
		}
		if !c.IsSecret() || !strings.Contains(c.SecretValue().Element.StringValue(), `database_type = "postgres"`) {
			t.Fatalf("server.conf: secret %v; want a secret naming the postgres datastore", c.IsSecret())
		}
	}
	_, err = run(t, "local", func(c map[string]string) {
		localHosts(c)
		os.WriteFile(dsn, []byte("not a dsn"), 0o600)
		c["lockplane:spire"] = `{"postgresFile":"` + dsn + `"}`
	})
	if err == nil || !strings.Contains(err.Error(), "spire.postgresFile") {
		t.Fatalf("a file without a connection string: %v", err)
	}
}
