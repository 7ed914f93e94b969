package provider_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/nodes/provider"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/plugin"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"golang.org/x/crypto/ssh"
)

// These tests reach no host: they drive the provider's RPCs alone.

// sshKeys are an unencrypted private key and a host key, as a connection
// carries them.
func sshKeys(t *testing.T) (private, host string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(block)), strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp)))
}

// shardRestoreInputs are a ShardRestore's inputs as the program gives
// them, the members' SSH keys and the snapshot store's secret key secret.
func shardRestoreInputs(t *testing.T, key string) resource.PropertyMap {
	t.Helper()
	_, hostKey := sshKeys(t)
	var members []resource.PropertyValue
	for i, addr := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
		conn := resource.NewPropertyMapFromMap(map[string]any{"host": addr, "user": "root", "hostKey": hostKey})
		conn["privateKey"] = resource.MakeSecret(resource.NewStringProperty(key))
		m := resource.NewPropertyMapFromMap(map[string]any{"name": "m" + string(rune('1'+i)), "peerUrl": "https://" + addr + ":2380",
			"dataDir": "/var/lib/lockplane/etcd/entity-0", "service": map[string]any{"name": "etcd-entity-0", "mode": provider.ModeSystemd}})
		m["connection"] = resource.NewObjectProperty(conn)
		members = append(members, resource.NewObjectProperty(m))
	}
	in := resource.NewPropertyMapFromMap(map[string]any{"vaultUrl": "http://127.0.0.1:9000", "vaultAccessKey": "restore-r1",
		"region": "r1", "cluster": "entity-0", "snapshot": "entity-0/20261201T000000.000Z-r7-aaaaaaaaaaaa",
		"trustedKeys":    []any{"ed25519:" + strings.Repeat("A", 43) + "="},
		"snapshotSha256": strings.Repeat("ab", 32), "endpoints": []any{"https://10.0.0.1:2379"},
		"caCertPem": "CA", "certPem": "CERT", "revisionBump": 1000000000})
	in["vaultSecretKey"] = resource.MakeSecret(resource.NewStringProperty("restorer-password"))
	in["keyPem"] = resource.MakeSecret(resource.NewStringProperty("KEY"))
	in["members"] = resource.NewArrayProperty(members)
	return in
}

func marshal(t *testing.T, m resource.PropertyMap) *pulumirpc.CreateResponse {
	t.Helper()
	s, err := plugin.MarshalProperties(m, plugin.MarshalOptions{KeepSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	return &pulumirpc.CreateResponse{Properties: s}
}

// An update of a ShardRestore (a rotated SSH key, a new snapshot store password)
// restores nothing, and keeps every member's SSH key secret in the state:
// the members' connections are nested, not the top-level connection.
func TestShardRestoreUpdateKeepsTheMembersKeysSecret(t *testing.T) {
	p := provider.New()
	oldKey, _ := sshKeys(t)
	newKey, _ := sshKeys(t)
	olds := shardRestoreInputs(t, oldKey)
	st := olds.Copy()
	st["clusterId"], st["restoredAt"] = resource.NewStringProperty("abc"), resource.NewStringProperty("2026-12-04T12:00:00Z")
	st["token"] = resource.MakeSecret(resource.NewStringProperty("r1-entity-0-restored-x"))
	news := shardRestoreInputs(t, newKey)

	d, err := p.Diff(context.Background(), &pulumirpc.DiffRequest{Urn: urn("ShardRestore", "s"), Olds: marshal(t, st).Properties,
		OldInputs: marshal(t, olds).Properties, News: marshal(t, news).Properties})
	if err != nil || d.Changes != pulumirpc.DiffResponse_DIFF_SOME || len(d.Replaces) != 0 {
		t.Fatalf("diff of a rotated SSH key: %+v %v, want an update, no restore", d, err)
	}
	resp, err := p.Update(context.Background(), &pulumirpc.UpdateRequest{Urn: urn("ShardRestore", "s"), Id: "r1/entity-0@x",
		Olds: marshal(t, st).Properties, OldInputs: marshal(t, olds).Properties, News: marshal(t, news).Properties})
	if err != nil {
		t.Fatal(err)
	}
	got, err := plugin.UnmarshalProperties(resp.Properties, plugin.MarshalOptions{KeepSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range got["members"].ArrayValue() {
		if m.IsSecret() {
			continue
		}
		if k := m.ObjectValue()["connection"]; !k.IsSecret() && !k.ObjectValue()["privateKey"].IsSecret() {
			t.Errorf("members[%d].connection.privateKey is stored in the clear after an update", i)
		}
	}
	for _, k := range []resource.PropertyKey{"token", "vaultSecretKey", "keyPem"} {
		if !got[k].IsSecret() {
			t.Errorf("%s is stored in the clear after an update", k)
		}
	}
}

// A ShardRestore's inputs are checked with the field and the rule named;
// a change of the revision bump (a margin the program sets) or of the
// certificate that reads the shard's head restores nothing again.
func TestShardRestoreInputsAreChecked(t *testing.T) {
	p := provider.New()
	key, _ := sshKeys(t)
	in := shardRestoreInputs(t, key)
	check := func(edit func(resource.PropertyMap)) string {
		t.Helper()
		news := in.Copy()
		edit(news)
		c, err := p.Check(context.Background(), &pulumirpc.CheckRequest{Urn: urn("ShardRestore", "s"), News: marshal(t, news).Properties})
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Failures) == 0 {
			return ""
		}
		return c.Failures[0].Reason
	}
	if got := check(func(resource.PropertyMap) {}); got != "" {
		t.Fatalf("valid inputs refused: %s", got)
	}
	for want, edit := range map[string]func(resource.PropertyMap){
		"revisionBump: 0 must be at least 1": func(m resource.PropertyMap) { delete(m, "revisionBump") },
		"endpoints: the running shard's":     func(m resource.PropertyMap) { delete(m, "endpoints") },
		"caCertPem, certPem, keyPem:":        func(m resource.PropertyMap) { delete(m, "keyPem") },
	} {
		if got := check(edit); !strings.HasPrefix(got, want) {
			t.Errorf("check: %q, want %q", got, want)
		}
	}

	olds := marshal(t, in).Properties
	for _, edit := range []func(resource.PropertyMap){
		func(m resource.PropertyMap) { m["revisionBump"] = resource.NewNumberProperty(2000000000) },
		func(m resource.PropertyMap) { m["certPem"] = resource.NewStringProperty("CERT 2") },
		func(m resource.PropertyMap) { m["endpoints"] = resource.NewArrayProperty(nil) },
	} {
		news := in.Copy()
		edit(news)
		d, err := p.Diff(context.Background(), &pulumirpc.DiffRequest{Urn: urn("ShardRestore", "s"), Olds: olds, OldInputs: olds,
			News: marshal(t, news).Properties})
		if err != nil || len(d.Replaces) != 0 {
			t.Errorf("diff %v: replaces %v (%v): a restore done is not done again for it", d.GetDiffs(), d.GetReplaces(), err)
		}
	}
}

// A restore in place reads the running shard's head with the deployer's
// certificate alone, authentication on as in a region, and takes the
// highest a member answers with; no member answering is 0, within the
// read's deadlines.
func TestShardRestoreReadsTheHeadWithTheCertificateAlone(t *testing.T) {
	endpoint, ca, certPEM, keyPEM := tlsEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	auth := map[string]any{"endpoints": []any{endpoint}, "caCertPem": string(ca.CertPEM), "certPem": string(certPEM), "keyPem": string(keyPEM),
		"rootPassword": "root-pw", "arbiterPassword": "arbiter-pw", "adminPassword": "admin-pw", "tailerPassword": "tailer-pw"}
	root, err := etcdClient(t, endpoint, ca, certPEM, keyPEM, "", "")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := root.Put(ctx, fmt.Sprintf("/k%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := provider.New().Create(ctx, &pulumirpc.CreateRequest{Urn: urn("EtcdAuth", "shard"), Properties: props(t, auth)}); err != nil {
		t.Fatal(err)
	}
	if root, err = etcdClient(t, endpoint, ca, certPEM, keyPEM, "root", "root-pw"); err != nil {
		t.Fatal(err)
	}
	resp, err := root.Get(ctx, "/k0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "https://127.0.0.1:1"
	head, err := provider.ShardHead(ctx, []string{dead, endpoint}, string(ca.CertPEM), string(certPEM), string(keyPEM))
	if err != nil || head != resp.Header.Revision {
		t.Fatalf("head %d (%v), want %d, the shard's revision", head, err, resp.Header.Revision)
	}
	began := time.Now()
	if head, err = provider.ShardHead(ctx, []string{dead}, string(ca.CertPEM), string(certPEM), string(keyPEM)); err != nil || head != 0 {
		t.Fatalf("no member answering: head %d (%v), want 0", head, err)
	}
	if took := time.Since(began); took > 20*time.Second {
		t.Fatalf("no member answering took %s", took)
	}
	if _, err := provider.ShardHead(ctx, []string{endpoint}, "no CA", string(certPEM), string(keyPEM)); err == nil || !strings.HasPrefix(err.Error(), "caCertPem:") {
		t.Fatalf("a CA that is none: %v, want caCertPem named", err)
	}
}

// A shard's EtcdAuth takes its restore's time: a new restore in place is
// an update, which applies the users and passwords again over the
// snapshot's, never a replace.
func TestEtcdAuthIsUpdatedByARestoreInPlace(t *testing.T) {
	p := provider.New()
	in := map[string]any{"endpoints": []any{"https://10.0.0.1:2379"}, "caCertPem": "CA", "certPem": "CERT", "keyPem": "KEY",
		"rootPassword": "root-pw", "arbiterPassword": "arbiter-pw", "adminPassword": "admin-pw", "tailerPassword": "tailer-pw"}
	olds := props(t, in)
	in["restoredAt"] = "2026-12-04T12:00:00.5Z"
	news := props(t, in)
	c, err := p.Check(context.Background(), &pulumirpc.CheckRequest{Urn: urn("EtcdAuth", "shard"), News: news})
	if err != nil || len(c.Failures) != 0 {
		t.Fatalf("check with restoredAt: %v %v", c.GetFailures(), err)
	}
	d, err := p.Diff(context.Background(), &pulumirpc.DiffRequest{Urn: urn("EtcdAuth", "shard"), Olds: olds, OldInputs: olds, News: news})
	if err != nil || d.Changes != pulumirpc.DiffResponse_DIFF_SOME || len(d.Replaces) != 0 {
		t.Fatalf("diff after a restore in place: %+v %v, want an update", d, err)
	}
}
