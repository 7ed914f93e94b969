package program_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/lockplane/lockplane/infra/components"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// drStack runs the DR stack with the source region's root password set,
// as its comments ask.
func drStack(c map[string]string) {
	localHosts(c)
	c["lockplane:etcdRootPassword"] = "the-region-root-password"
}

// A DR stack chooses one snapshot per cluster, as the region's restorer,
// and restores every member's data dir before its etcd first starts: into
// exactly the member's --data-dir, as a member of the cluster its flags
// name (the same peer URLs and new token), so the cluster comes back
// under a new ID and sealed.
func TestADRStackRestoresEveryMemberBeforeItStarts(t *testing.T) {
	m, err := run(t, "local-dr", drStack)
	if err != nil {
		t.Fatal(err)
	}
	snaps := m.of("lockplane:nodes:VaultSnapshot")
	clusters := map[string]bool{}
	for _, r := range snaps {
		in := r.Inputs
		clusters[in["cluster"].StringValue()] = true
		if in["snapshot"].StringValue() != "latest" || in["vaultAccessKey"].StringValue() != "restore-local" ||
			!in["vaultSecretKey"].IsSecret() || in["region"].StringValue() != "local" || in["vaultUrl"].StringValue() != "https://10.231.0.30:9000" {
			t.Errorf("%s: inputs %v", r.Name, in)
		}
		// Verified against its own cluster's key, from the store stack.
		if keys := strs(in["trustedKeys"]); len(keys) != 1 || keys[0] != "ed25519:PUB-local-"+in["cluster"].StringValue() {
			t.Errorf("%s: trustedKeys %v, want cluster %s's public key only", r.Name, keys, in["cluster"].StringValue())
		}
	}
	if len(snaps) != 2 || !clusters["coord"] || !clusters["entity-0"] {
		t.Fatalf("StoreSnapshots for %v, want one for coord and one for entity-0", clusters)
	}
	restores := map[string]pulumi.MockResourceArgs{}
	for _, r := range m.of("lockplane:nodes:EtcdRestore") {
		restores[strings.TrimSuffix(r.Name, "-restore")] = r
	}
	etcd := etcdCommands(m)
	if len(restores) != 6 || len(etcd) != 6 {
		t.Fatalf("%d restores for %d members", len(restores), len(etcd))
	}
	for svc, cmd := range etcd {
		member := strings.TrimSuffix(svc, "-service")
		r, ok := restores[member]
		if !ok {
			t.Fatalf("%s has no restore", member)
		}
		in := r.Inputs
		if in["dataDir"].StringValue() != flag(cmd, "--data-dir") || in["memberName"].StringValue() != flag(cmd, "--name") {
			t.Errorf("%s: restores %s as %s; etcd runs %s as %s", member, in["dataDir"], in["memberName"], flag(cmd, "--data-dir"), flag(cmd, "--name"))
		}
		var initial []string
		for name, url := range in["members"].ObjectValue() {
			initial = append(initial, fmt.Sprintf("%s=%s", name, url.StringValue()))
		}
		for _, e := range initial {
			if !strings.Contains(","+flag(cmd, "--initial-cluster")+",", ","+e+",") {
				t.Errorf("%s: restores member %s, not in --initial-cluster %s", member, e, flag(cmd, "--initial-cluster"))
			}
		}
		if len(initial) != strings.Count(flag(cmd, "--initial-cluster"), "=") {
			t.Errorf("%s: restores %d members, --initial-cluster has %s", member, len(initial), flag(cmd, "--initial-cluster"))
		}
		if tok := in["token"]; !tok.IsSecret() || tok.SecretValue().Element.StringValue() != flag(cmd, "--initial-cluster-token") {
			t.Errorf("%s: restore token %v, etcd's --initial-cluster-token %s", member, tok, flag(cmd, "--initial-cluster-token"))
		}
		cluster := in["cluster"].StringValue()
		if keys := strs(in["trustedKeys"]); len(keys) != 1 || keys[0] != "ed25519:PUB-local-"+cluster {
			t.Errorf("%s: trustedKeys %v, want cluster %s's public key only", member, keys, cluster)
		}
		if !strings.HasPrefix(in["snapshot"].StringValue(), cluster+"/") {
			t.Errorf("%s: restores snapshot %v of another cluster", member, in["snapshot"])
		}
	}
	for _, r := range m.of("lockplane:nodes:Service") {
		if strings.HasPrefix(r.Inputs["name"].StringValue(), "etcd-") && !dependsOnSuffix(r, strings.TrimSuffix(r.Name, "-service")+"-restore") {
			t.Errorf("%s starts without waiting for its restore", r.Name)
		}
	} // The epoch step only adopts the restored record: it never anchors or
	// bootstraps a restored cluster (that would unseal it, operator-less).
	for _, r := range m.of("lockplane:nodes:EtcdEpoch") {
		if !r.Inputs["restored"].BoolValue() {
			t.Errorf("%s: restored %v, want true", r.Name, r.Inputs["restored"])
		}
	}
}

// The restored clusters keep the source region's etcd users: without
// that region's root password nothing is made, and the error says what
// to set. A pinned object chooses a cluster's snapshot.
func TestADRStackNeedsTheRegionsRootPasswordAndTakesPinnedSnapshots(t *testing.T) {
	m := &mocks{}
	_, err := runWith(t, m, "local-dr", localHosts)
	if err == nil || !strings.Contains(err.Error(), "set lockplane:etcdRootPassword (secret) to that region's root password") {
		t.Fatalf("err %v", err)
	}
	if len(m.of("lockplane:nodes:Service")) != 0 {
		t.Fatal("services made without the root password")
	}
	m, err = run(t, "local-dr", func(c map[string]string) {
		drStack(c)
		c["lockplane:restore"] = `{"storeStack":"local-snapshots","objects":{"coord":"coord/20261201T000000.000Z-r7-aaaaaaaaaaaa.json"}}`
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range m.of("lockplane:nodes:VaultSnapshot") {
		want := "latest"
		if r.Inputs["cluster"].StringValue() == "coord" {
			want = "coord/20261201T000000.000Z-r7-aaaaaaaaaaaa.json"
		}
		if got := r.Inputs["snapshot"].StringValue(); got != want {
			t.Errorf("%s: snapshot %q, want %q", r.Name, got, want)
		}
	}
	_, err = run(t, "local-dr", func(c map[string]string) {
		drStack(c)
		c["lockplane:restore"] = `{"storeStack":"local-snapshots","objects":{"entity-7":"x"}}`
	})
	if err == nil || !strings.Contains(err.Error(), `restore.objects: "entity-7" is not a cluster of the region`) {
		t.Fatalf("a pinned snapshot of no cluster: %v", err)
	}
}

// restore.epochFloor, the operators' floor for the unseal, is an epoch,
// and only a DR stack has one.
func TestARestoresEpochFloorIsValidated(t *testing.T) {
	if _, err := run(t, "local-dr", func(c map[string]string) {
		drStack(c)
		c["lockplane:restore"] = `{"storeStack":"local-snapshots","from":"latest","epochFloor":4242}`
	}); err != nil {
		t.Fatalf("epochFloor 4242: %v", err)
	}
	for restore, want := range map[string]string{
		`{"storeStack":"local-snapshots","from":"latest","epochFloor":-1}`: "restore.epochFloor: -1 must be an epoch",
		`{"epochFloor":7}`: "restore: set without restore.storeStack",
		// Beyond any epoch a token carries: no unseal could anchor on it.
		`{"storeStack":"local-snapshots","from":"latest","epochFloor":32667}`: "restore.epochFloor: 32667 must be an epoch from 0 to 32666",
	} {
		_, err := run(t, "local-dr", func(c map[string]string) { drStack(c); c["lockplane:restore"] = restore })
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", restore, err, want)
		}
	}
}

// A region stack restores nothing.
func TestARegionStackRestoresNothing(t *testing.T) {
	m, err := run(t, "local", localHosts)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(m.of("lockplane:nodes:EtcdRestore")) + len(m.of("lockplane:nodes:VaultSnapshot")); n != 0 {
		t.Fatalf("%d restore resources in a region stack", n)
	}
	for _, r := range m.of("lockplane:nodes:EtcdEpoch") {
		if _, ok := r.Inputs["restored"]; ok {
			t.Errorf("%s: restored set in a region stack", r.Name)
		}
	}
}

// A region restores a shard in place from its own snapshot store, as its
// restorer: one snapshot chosen once, one restore of every member of the
// shard (exactly the data dir, name, peer URL and service its etcd runs
// as), each member's service restarted after it by its restoredAt, and
// the shard not formed until it answers under the restore's new ID.
// Coord and the other clusters are not touched.
func TestARegionRestoresAShardInPlace(t *testing.T) {
	m, err := run(t, "local", func(c map[string]string) {
		localHosts(c)
		c["lockplane:restoreInPlace"] = `{"entity-0":"entity-0/20261201T000000.000Z-r7-aaaaaaaaaaaa.json"}`
	})
	if err != nil {
		t.Fatal(err)
	}
	snaps := m.of("lockplane:nodes:VaultSnapshot")
	if len(snaps) != 1 || snaps[0].Inputs["cluster"].StringValue() != "entity-0" || snaps[0].Inputs["vaultAccessKey"].StringValue() != "restore-local" ||
		snaps[0].Inputs["snapshot"].StringValue() != "entity-0/20261201T000000.000Z-r7-aaaaaaaaaaaa.json" || !snaps[0].Inputs["vaultSecretKey"].IsSecret() {
		t.Fatalf("StoreSnapshots %v, want entity-0's pinned one, read as the region's restorer", snaps)
	}
	rs := m.of("lockplane:nodes:ShardRestore")
	if len(rs) != 1 || rs[0].Inputs["cluster"].StringValue() != "entity-0" || len(m.of("lockplane:nodes:EtcdRestore")) != 0 {
		t.Fatalf("%d ShardRestores, %d EtcdRestores: want one ShardRestore, of entity-0", len(rs), len(m.of("lockplane:nodes:EtcdRestore")))
	}
	restore := rs[0]
	for _, r := range []pulumi.MockResourceArgs{snaps[0], restore} {
		if keys := strs(r.Inputs["trustedKeys"]); len(keys) != 1 || keys[0] != "ed25519:PUB-local-entity-0" {
			t.Errorf("%s: trustedKeys %v, want entity-0's public key only", r.Name, keys)
		}
	}
	if restore.Inputs["snapshot"].StringValue() != "entity-0/20261204T120000.000Z-r42-0123456789ab" || restore.Inputs["snapshotSha256"].StringValue() != "sha-"+snaps[0].Name {
		t.Errorf("the restore takes %v (%v), not the StoreSnapshot's choice", restore.Inputs["snapshot"], restore.Inputs["snapshotSha256"])
	}
	// Its revisions start above the running shard's head, read with the
	// deployer's certificate at the shard's own endpoints.
	var formed pulumi.MockResourceArgs
	for _, r := range m.of("lockplane:nodes:EtcdCluster") {
		if strings.HasSuffix(r.Name, "-entity-0-formed") {
			formed = r
		}
	}
	if got := restore.Inputs["revisionBump"]; !got.IsNumber() || got.NumberValue() != components.InPlaceRevisionBump {
		t.Errorf("revisionBump %v, want %d: the restored shard's watchers must be told their revisions are compacted", got, components.InPlaceRevisionBump)
	}
	if !restore.Inputs["endpoints"].DeepEquals(formed.Inputs["endpoints"]) || restore.Inputs["certPem"].StringValue() != formed.Inputs["certPem"].StringValue() ||
		!strings.HasSuffix(restore.Inputs["certPem"].StringValue(), "-entity-0-deployer") || !restore.Inputs["keyPem"].IsSecret() {
		t.Errorf("the restore reads the head at %v with %v (key secret: %v), want entity-0's endpoints %v and deployer certificate",
			restore.Inputs["endpoints"], restore.Inputs["certPem"], restore.Inputs["keyPem"].IsSecret(), formed.Inputs["endpoints"])
	}
	members := map[string]map[string]string{}
	for _, v := range restore.Inputs["members"].ArrayValue() {
		o := v.ObjectValue()
		svc := o["service"].ObjectValue()
		members[o["name"].StringValue()] = map[string]string{"dataDir": o["dataDir"].StringValue(), "peerUrl": o["peerUrl"].StringValue(),
			"service": svc["name"].StringValue(), "stateDir": svc["stateDir"].StringValue(), "host": o["connection"].ObjectValue()["host"].StringValue()}
	}
	var restarted int
	for _, r := range m.of("lockplane:nodes:Service") {
		name := r.Inputs["name"].StringValue()
		if !strings.HasPrefix(name, "etcd-") {
			continue
		}
		cmd := strs(r.Inputs["command"])
		triggered := slices.Contains(strs(r.Inputs["triggers"]), "2026-12-04T12:00:00.5Z")
		if name != "etcd-entity-0" {
			if triggered || dependsOnSuffix(r, "-in-place-restore") {
				t.Errorf("%s is restarted by entity-0's restore", r.Name)
			}
			continue
		}
		restarted++
		mem, ok := members[flag(cmd, "--name")]
		if !ok {
			t.Fatalf("%s (member %s) is not restored", r.Name, flag(cmd, "--name"))
		}
		if mem["dataDir"] != flag(cmd, "--data-dir") || !strings.Contains(flag(cmd, "--initial-cluster"), flag(cmd, "--name")+"="+mem["peerUrl"]) ||
			mem["service"] != name || mem["stateDir"] != r.Inputs["stateDir"].StringValue() || mem["host"] != r.Inputs["connection"].ObjectValue()["host"].StringValue() {
			t.Errorf("%s runs %v on %v; the restore stops and replaces %v", r.Name, cmd, r.Inputs["connection"].ObjectValue()["host"], mem)
		}
		if !triggered || !dependsOnSuffix(r, "-in-place-restore") {
			t.Errorf("%s: triggers %v: want it restarted after the restore, by its restoredAt", r.Name, strs(r.Inputs["triggers"]))
		}
	}
	if restarted != len(members) || restarted != 3 {
		t.Fatalf("%d entity-0 members restarted, %d restored: want all 3", restarted, len(members))
	}
	// The snapshot's users and passwords are those of its time: the
	// shard's are applied again after the restore, no other cluster's.
	for _, r := range m.of("lockplane:nodes:EtcdAuth") {
		want := ""
		if strings.Contains(r.Name, "entity-0") {
			want = "2026-12-04T12:00:00.5Z"
		}
		if got := r.Inputs["restoredAt"]; (want == "" && !got.IsNull()) || (want != "" && (!got.IsString() || got.StringValue() != want)) {
			t.Errorf("%s: restoredAt %v, want %q", r.Name, got, want)
		}
	}
	for _, r := range m.of("lockplane:nodes:EtcdCluster") {
		want := ""
		if strings.Contains(r.Name, "entity-0") {
			want = "restored-" + restore.Name
		}
		if got := r.Inputs["expectClusterId"]; (want == "" && !got.IsNull()) || (want != "" && got.StringValue() != want) {
			t.Errorf("%s: expectClusterId %v, want %q", r.Name, got, want)
		}
	}

	for edit, want := range map[string]string{
		`{"coord":"latest"}`:    "restoreInPlace.coord: coord is never restored in place",
		`{"entity-3":"latest"}`: `restoreInPlace: "entity-3" is not an entity shard of the region (entity-0 ... entity-0)`,
		`{"entity-0":"coord/20261201T000000.000Z-r7-aaaaaaaaaaaa.json"}`: `restoreInPlace.entity-0: "coord/20261201T000000.000Z-r7-aaaaaaaaaaaa.json" is not a snapshot of entity-0`,
	} {
		m, err := run(t, "local", func(c map[string]string) {
			localHosts(c)
			c["lockplane:restoreInPlace"] = edit
		})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("restoreInPlace %s: %v, want %q", edit, err, want)
		}
		if len(m.of("lockplane:nodes:Service")) != 0 {
			t.Errorf("restoreInPlace %s: services made", edit)
		}
	}
}
