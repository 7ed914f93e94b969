package program_test

import (
	"fmt"
	"strings"
	"testing"

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
	}
	if len(snaps) != 2 || !clusters["coord"] || !clusters["entity-0"] {
		t.Fatalf("VaultSnapshots for %v, want one for coord and one for entity-0", clusters)
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
		c["lockplane:restore"] = `{"vaultStack":"local-vault","objects":{"coord":"coord/20261201T000000.000Z-r7-aaaaaaaaaaaa.json"}}`
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
		c["lockplane:restore"] = `{"vaultStack":"local-vault","objects":{"entity-7":"x"}}`
	})
	if err == nil || !strings.Contains(err.Error(), `restore.objects: "entity-7" is not a cluster of the region`) {
		t.Fatalf("a pinned snapshot of no cluster: %v", err)
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
