package program_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/lockplane/lockplane/infra/program"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
)

// Every cluster's snapshot job runs on its own member hosts and nowhere
// else, signs in as the snapshot user (made by its cluster's EtcdAuth,
// which it waits for) and stores as its own cluster's storer, signing with
// its own cluster's key: each credential and the key in a 0600 file whose
// content is secret, on that cluster's member hosts only.
func TestSnapshotJobsRunOnTheirMemberHostsAsTheSnapshotUser(t *testing.T) {
	m, err := run(t, "local", localHosts)
	if err != nil {
		t.Fatal(err)
	}
	hostOf := func(r resource.PropertyValue) string { return r.ObjectValue()["host"].StringValue() }
	want := map[string][]string{
		"lockplane-snapshot-coord":    {"10.231.0.11", "10.231.0.12", "10.231.0.13", "10.231.0.14", "10.231.0.15"},
		"lockplane-snapshot-entity-0": {"10.231.0.16", "10.231.0.17", "10.231.0.18"},
	}
	for name, hosts := range want {
		var got []string
		for _, r := range services(m, name) {
			got = append(got, hostOf(r.Inputs["connection"]))
			cmd := strs(r.Inputs["command"])
			cluster := strings.TrimPrefix(name, "lockplane-snapshot-")
			if flag(cmd, "--region") != "local" || flag(cmd, "--cluster") != cluster || flag(cmd, "--store") != "https://10.231.0.30:9000" ||
				flag(cmd, "--every") != "1h" || !strings.HasPrefix(flag(cmd, "--endpoint"), "https://"+hostOf(r.Inputs["connection"])+":") ||
				!strings.HasSuffix(flag(cmd, "--etcd-credentials"), "/"+cluster+"/snapshot-etcd-credentials") || flag(cmd, "--etcd-without-auth") != "" ||
				!strings.HasSuffix(flag(cmd, "--signing-key"), "/"+cluster+"/snapshot-signing-key.pem") {
				t.Errorf("%s: command %v", r.Name, cmd)
			}
			if !dependsOnSuffix(r, "-"+cluster+"-auth") {
				t.Errorf("%s does not wait for its cluster's EtcdAuth", r.Name)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, hosts) {
			t.Errorf("%s runs on %v, want its member hosts %v", name, got, hosts)
		}
	}
	files := 0
	lines := map[string]string{} // the snapshot user's line, by cluster (its first member)
	for _, r := range m.of("lockplane:nodes:File") {
		p := r.Inputs["path"].StringValue()
		if !strings.HasSuffix(p, "/snapshot-etcd-credentials") && !strings.HasSuffix(p, "/snapshot-vault-credentials") &&
			!strings.HasSuffix(p, "/snapshot-signing-key.pem") {
			continue
		}
		files++
		// Only the cluster's own member hosts hold them.
		host := hostOf(r.Inputs["connection"])
		members, cluster := want["lockplane-snapshot-coord"], "coord"
		if strings.Contains(p, "/entity-0/") {
			members, cluster = want["lockplane-snapshot-entity-0"], "entity-0"
		}
		if !slices.Contains(members, host) {
			t.Errorf("%s is on %s, not one of its cluster's member hosts %v", p, host, members)
		}
		c := r.Inputs["content"]
		if r.Inputs["mode"].StringValue() != "0600" || !c.IsSecret() {
			t.Errorf("%s: mode %v, secret %v", p, r.Inputs["mode"], c.IsSecret())
		}
		v := c.SecretValue().Element.StringValue()
		if strings.HasSuffix(p, "etcd-credentials") {
			if !strings.HasPrefix(v, "snapshot snapshot:generated-") {
				t.Errorf("%s: %q is not the snapshot user's line", p, v)
			}
			lines[members[0]] = v
		}
		if strings.HasSuffix(p, "vault-credentials") && v != "vault snap-local-"+cluster+":storer-password-local-"+cluster+"\n" {
			t.Errorf("%s: %q is not cluster %s's own storer", p, v, cluster)
		}
		if strings.HasSuffix(p, "signing-key.pem") && v != "SIGNING KEY local-"+cluster {
			t.Errorf("%s: %q is not cluster %s's own signing key", p, v, cluster)
		}
	}
	if files != 24 {
		t.Errorf("%d credentials files, want 3 on each of 8 member hosts", files)
	}
	// Root of its own cluster only: each cluster's snapshot user has its
	// own password.
	if len(lines) != 2 || lines["10.231.0.11"] == lines["10.231.0.16"] {
		t.Errorf("snapshot users' lines by cluster %v: want one password per cluster", lines)
	}
	for _, r := range m.of("lockplane:nodes:EtcdAuth") {
		if pw := r.Inputs["snapshotPassword"]; !pw.IsSecret() || !strings.HasPrefix(pw.SecretValue().Element.StringValue(), "generated-") {
			t.Errorf("%s: snapshotPassword %v: want the snapshot user made, its password secret", r.Name, pw)
		}
	}
}

// Without lockplane:snapshots there is no job and no snapshot user: a
// user with etcd's root role exists only where snapshots need it.
func TestNoSnapshotsNoSnapshotUser(t *testing.T) {
	m, err := run(t, "local", func(c map[string]string) { localHosts(c); delete(c, "lockplane:snapshots") })
	if err != nil {
		t.Fatal(err)
	}
	if n := len(services(m, "lockplane-snapshot-coord")); n != 0 {
		t.Fatalf("%d snapshot jobs without snapshots", n)
	}
	for _, r := range m.of("lockplane:nodes:EtcdAuth") {
		if _, ok := r.Inputs["snapshotPassword"]; ok {
			t.Errorf("%s makes a snapshot user without snapshots", r.Name)
		}
	}
	if len(m.reads) != 0 {
		t.Errorf("store stacks read without snapshots: %v", m.reads)
	}
}

// A store stack that keeps no bucket for the region refuses the region
// before anything is made, naming what to add.
func TestARegionTheStoreDoesNotKeepIsRefused(t *testing.T) {
	euWest := localStore("eu-west")
	m := &mocks{stores: map[string]program.StoreOutputs{"local-snapshots": euWest}}
	_, err := runWith(t, m, "local", localHosts)
	if err == nil || !strings.Contains(err.Error(), "keeps no snapshots of region local: add {region: local, shards: 1} to its lockplane:snapshotStore.regions") {
		t.Fatalf("err %v", err)
	}
	if len(m.res) != 0 {
		t.Fatalf("%d resources made for a refused region", len(m.res))
	}
}

// A store stack that keeps the region but not every one of its shards
// (its snapshotStore.regions entry says fewer shards) refuses the region before
// anything is made, naming the entry to set: a shard without its own
// storer and key would go unsnapshotted, or restored against no key.
func TestAShardTheStoreDoesNotKeepIsRefused(t *testing.T) {
	v := localStore("local")
	delete(v.Regions["local"].Clusters, "entity-0")
	m := &mocks{stores: map[string]program.StoreOutputs{"local-snapshots": v}}
	_, err := runWith(t, m, "local", localHosts)
	if err == nil || !strings.Contains(err.Error(), "has no storer or snapshot signing key for cluster entity-0 of region local: "+
		"set region local's entry in its lockplane:snapshotStore.regions to {region: local, shards: 1}") {
		t.Fatalf("err %v", err)
	}
	if len(m.res) != 0 {
		t.Fatalf("%d resources made for a refused region", len(m.res))
	}
}

// A store stack never deployed (no outputs) or missing from the backend
// refuses the region before anything is made, saying to deploy it.
func TestAStoreStackNotDeployedIsRefused(t *testing.T) {
	for _, stores := range []map[string]program.StoreOutputs{{"local-snapshots": {}}, {}} {
		m := &mocks{stores: stores}
		_, err := runWith(t, m, "local", localHosts)
		if err == nil || !strings.Contains(err.Error(), "snapshots.storeStack: local-snapshots") ||
			!strings.Contains(err.Error(), "run `lockplane up --stack local-snapshots` first") {
			t.Errorf("stores %v: err %v", stores, err)
		}
		if len(m.res) != 0 {
			t.Errorf("stores %v: %d resources made for a refused region", stores, len(m.res))
		}
	}
}

// Under a plain `pulumi up` (program.Run, no reader) a region that names
// a snapshot store is refused before anything is made, naming the field and the
// `lockplane up` that hands it its own users.
func TestWithoutAReaderAStoreIsRefused(t *testing.T) {
	for _, c := range []struct {
		stack string
		edit  func(map[string]string)
		field string
	}{
		{"local", localHosts, "snapshots.storeStack"},
		{"local-dr", func(c map[string]string) { drStack(c); delete(c, "lockplane:snapshots") }, "restore.storeStack"},
	} {
		m := &mocks{}
		_, err := runProgram(t, program.Run, m, c.stack, c.edit)
		if err == nil || !strings.Contains(err.Error(), c.field+": local-snapshots: run `bin/lockplane up --stack "+c.stack+"`") {
			t.Errorf("%s: err %v", c.stack, err)
		}
		if len(m.res) != 0 {
			t.Errorf("%s: %d resources made", c.stack, len(m.res))
		}
	}
}

// A region with snapshots and restore holds its own snapshot store users only:
// no stack reference (which would store every output of the store stack,
// every region's users among them), and no other region's user name or
// password in any resource's inputs or outputs. Its snapshot store is read once,
// though both fields name it.
func TestARegionHoldsOnlyItsOwnStoreUsers(t *testing.T) {
	m := &mocks{stores: map[string]program.StoreOutputs{"local-snapshots": localStore("local", "eu-west")}}
	if _, err := runWith(t, m, "local-dr", drStack); err != nil {
		t.Fatal(err)
	}
	if n := len(m.of("pulumi:pulumi:StackReference")); n != 0 {
		t.Errorf("%d stack references: each copies every region's snapshot store users into this state", n)
	}
	if m.reads["local-snapshots"] != 1 {
		t.Errorf("local-snapshots read %d times, want once", m.reads["local-snapshots"])
	}
	eu, own := localStore("eu-west").Regions["eu-west"], localStore("local").Regions["local"]
	found := map[string]bool{}
	for i, r := range m.res {
		for _, props := range []resource.PropertyMap{r.Inputs, m.outs[i]} {
			texts(resource.NewObjectProperty(props), func(s string) {
				others := []string{eu.Restorer, eu.RestorerPassword}
				for _, c := range eu.Clusters {
					others = append(others, c.Storer, c.StorerPassword, c.SigningKey, c.PublicKey)
				}
				for _, other := range others {
					if strings.Contains(s, other) {
						t.Errorf("%s %s holds region eu-west's %s", r.TypeToken, r.Name, other)
					}
				}
				for _, mine := range []string{own.Clusters["coord"].StorerPassword, own.Clusters["coord"].SigningKey, own.RestorerPassword} {
					found[mine] = found[mine] || strings.Contains(s, mine)
				}
			})
		}
	}
	if !found[own.Clusters["coord"].StorerPassword] || !found[own.Clusters["coord"].SigningKey] || !found[own.RestorerPassword] {
		t.Errorf("the region's own passwords found %v: the test looked in the wrong place", found)
	}
}

// texts calls f with every string in v, secrets and outputs opened.
func texts(v resource.PropertyValue, f func(string)) {
	switch {
	case v.IsString():
		f(v.StringValue())
	case v.IsSecret():
		texts(v.SecretValue().Element, f)
	case v.IsOutput():
		texts(v.OutputValue().Element, f)
	case v.IsArray():
		for _, e := range v.ArrayValue() {
			texts(e, f)
		}
	case v.IsObject():
		for _, e := range v.ObjectValue() {
			texts(e, f)
		}
	}
}

// The store stack: MinIO on its one host, a bucket per region, a restorer
// per region and a storer and signing key per cluster, the root and
// users' passwords and the private keys secret, and outputs a region
// reads.
func TestTheStoreStackKeepsEachRegion(t *testing.T) {
	m, err := run(t, "local-snapshots", func(c map[string]string) {
		localHosts(c)
		c["lockplane:snapshotStore"] = `{"regions":[{"region":"local","shards":1},{"region":"eu-west","shards":2}]}`
	})
	if err != nil {
		t.Fatal(err)
	}
	minio := services(m, "minio")
	if len(minio) != 1 || minio[0].Inputs["connection"].ObjectValue()["host"].StringValue() != "10.231.0.30" {
		t.Fatalf("minio services %v", minio)
	}
	b := m.of("lockplane:nodes:VaultBuckets")
	if len(b) != 1 {
		t.Fatalf("%d StoreBuckets", len(b))
	}
	in := b[0].Inputs
	if !in["regions"].IsSecret() || !in["rootPassword"].IsSecret() || in["keepDays"].NumberValue() != 30 || in["url"].StringValue() != "https://10.231.0.30:9000" {
		t.Fatalf("StoreBuckets inputs %v", in)
	}
	var users []string
	for _, r := range in["regions"].SecretValue().Element.ArrayValue() {
		o := r.ObjectValue()
		u := o["region"].StringValue() + ":" + o["restorer"].StringValue()
		for _, c := range o["clusters"].ArrayValue() {
			u += "," + c.ObjectValue()["cluster"].StringValue() + "=" + c.ObjectValue()["storer"].StringValue()
		}
		if _, ok := o["storer"]; ok {
			t.Errorf("region %s has a region-wide storer", o["region"].StringValue())
		}
		users = append(users, u)
	}
	if !slices.Equal(users, []string{"local:restore-local,coord=snap-local-coord,entity-0=snap-local-entity-0",
		"eu-west:restore-eu-west,coord=snap-eu-west-coord,entity-0=snap-eu-west-entity-0,entity-1=snap-eu-west-entity-1"}) {
		t.Fatalf("snapshot store users %v", users)
	}
	keys := m.of("lockplane:nodes:SnapshotSigningKey")
	if len(keys) != 5 {
		t.Fatalf("%d signing keys, want one per cluster (5)", len(keys))
	}
	if !dependsOnSuffix(b[0], "vault-snapshots-1-service") {
		t.Errorf("StoreBuckets does not wait for MinIO")
	}
	// Nothing of a region: no etcd, no arbiter.
	if len(etcdCommands(m)) != 0 || len(services(m, "arbiter")) != 0 {
		t.Fatal("a store stack made region services")
	}
}

// A store stack's configuration is checked field by field.
func TestAStoreStackIsValidated(t *testing.T) {
	for _, c := range []struct{ store, hosts, want string }{
		{`{"regions":[]}`, "", "snapshotStore.regions: name at least one region"},
		{`{"regions":[{"region":"Local","shards":1}]}`, "", `snapshotStore.regions[0].region: "Local" must be a unique lower-case region name`},
		{`{"regions":[{"region":"local"}]}`, "", `snapshotStore.regions[0].shards: 0 must be the region's lockplane:entity.shards`},
		{`{"regions":["local"]}`, "", `"local": each region is now {region: local, shards: N}`},
		{`{"regions":[{"region":"local","shards":1,"storer":"x"}]}`, "", `unknown field "storer"`},
		{`{"regions":[{"region":"local","shards":1}],"keepDays":-1}`, "", "snapshotStore.keepDays: -1 must be at least 1"},
		{`{"regions":[{"region":"local","shards":1}]}`, `[{"name":"snapshots-1","address":"10.231.0.30","roles":["snapshot-store","coord"],"root":"/"}]`, "must be [snapshot-store]: the snapshot store's host is dedicated"},
		{`{"regions":[{"region":"local","shards":1}]}`, `[]`, "hosts: 0 given; a store stack has one host"},
	} {
		_, err := run(t, "local-snapshots", func(cfg map[string]string) {
			localHosts(cfg)
			cfg["lockplane:snapshotStore"] = c.store
			if c.hosts != "" {
				cfg["lockplane:hosts"] = c.hosts
			}
		})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("snapshot store %s hosts %s: err %v, want %q", c.store, c.hosts, err, c.want)
		}
	}
}

// A region's snapshots are checked field by field before anything is made.
func TestARegionsSnapshotsAreValidated(t *testing.T) {
	for _, c := range []struct{ snapshots, want string }{
		{`{"storeStack":"local-snapshots","every":"30s"}`, `snapshots.every: "30s" must be a duration from 1m to 168h`},
		{`{"storeStack":"Local_Snapshots"}`, `snapshots.storeStack: "Local_Snapshots" must be a stack name`},
		{`{"storeStack":"local-snapshots","metricsPort":2379}`, "snapshots.metricsPort: 2379 is one of etcd's ports"},
		{`{"every":"1h"}`, "snapshots: set without snapshots.storeStack"},
	} {
		m := &mocks{}
		_, err := runWith(t, m, "local", func(cfg map[string]string) { localHosts(cfg); cfg["lockplane:snapshots"] = c.snapshots })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("snapshots %s: err %v, want %q", c.snapshots, err, c.want)
		}
		if len(m.res) != 0 {
			t.Errorf("snapshots %s: %d resources made", c.snapshots, len(m.res))
		}
	}
}

// The repository's store stack file keeps the local region in the form
// {region, shards}, with the local region's shards.
func TestTheLocalStoreStackFileNamesTheLocalRegionsShards(t *testing.T) {
	m, err := run(t, "local-snapshots", localHosts)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(m.of("lockplane:nodes:SnapshotSigningKey")); n != 2 {
		t.Fatalf("%d signing keys, want coord's and entity-0's", n)
	}
}
