package nodes_test

import (
	"sync"
	"testing"

	"github.com/lockplane/lockplane/infra/nodes"
	"github.com/lockplane/lockplane/nodes/remote"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// restoreMocks answers a StoreSnapshot with a chosen manifest, as the
// provider does, and records every resource's inputs.
type restoreMocks struct {
	mu     sync.Mutex
	inputs map[string]resource.PropertyMap
}

func (m *restoreMocks) NewResource(args pulumi.MockResourceArgs) (string, resource.PropertyMap, error) {
	m.mu.Lock()
	m.inputs[args.Name] = args.Inputs
	m.mu.Unlock()
	out := args.Inputs.Copy()
	if args.TypeToken == "lockplane:nodes:VaultSnapshot" {
		out["manifest"] = resource.NewStringProperty("coord/20260101T000000.000Z-r7-0123456789ab")
		out["sha256"] = resource.NewStringProperty("0123456789ab" + "0000000000000000000000000000000000000000000000000000")
	}
	return args.Name + "-id", out, nil
}

func (m *restoreMocks) Call(args pulumi.MockCallArgs) (resource.PropertyMap, error) {
	return args.Args, nil
}

// Every member's EtcdRestore restores the StoreSnapshot's manifest, pinned
// by its digest; the snapshot store's secret key and the token are secret inputs.
func TestNewEtcdRestoreRestoresTheChosenSnapshot(t *testing.T) {
	m := &restoreMocks{inputs: map[string]resource.PropertyMap{}}
	members := map[string]string{"m1": "https://10.0.0.1:2380", "m2": "https://10.0.0.2:2380", "m3": "https://10.0.0.3:2380"}
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		v := nodes.SnapshotStore{URL: "https://vault:9000", CACertPem: pulumi.String("pem"), AccessKey: pulumi.String("reader"),
			SecretKey: pulumi.String("s3cret"), Region: "eu", Cluster: "coord"}
		snap, err := nodes.NewStoreSnapshot(ctx, "coord-snapshot", v, "latest")
		if err != nil {
			return err
		}
		for name := range members {
			conn := nodes.Connection{Target: remote.Target{Host: name, PrivateKey: "k", HostKey: "h"}}
			if _, err := nodes.NewEtcdRestore(ctx, "coord-"+name, nodes.EtcdRestoreArgs{Connection: conn, DataDir: "/var/lib/etcd-coord",
				Store: v, Snapshot: snap, MemberName: name, Members: members, Token: pulumi.String("tok")}); err != nil {
				return err
			}
		}
		return nil
	}, pulumi.WithMocks("lockplane", "test", m))
	if err != nil {
		t.Fatal(err)
	}
	if s := m.inputs["coord-snapshot"]; s["snapshot"].StringValue() != "latest" || !s["vaultSecretKey"].ContainsSecrets() {
		t.Fatalf("StoreSnapshot inputs %v", s)
	}
	for name := range members {
		in := m.inputs["coord-"+name]
		if in["snapshot"].StringValue() != "coord/20260101T000000.000Z-r7-0123456789ab" || in["snapshotSha256"].StringValue()[:12] != "0123456789ab" {
			t.Errorf("%s restores %v (%v), want the StoreSnapshot's manifest and digest", name, in["snapshot"], in["snapshotSha256"])
		}
		if !in["token"].ContainsSecrets() || !in["vaultSecretKey"].ContainsSecrets() {
			t.Errorf("%s: token %v, vaultSecretKey %v, want secret inputs", name, in["token"], in["vaultSecretKey"])
		}
		if in["memberName"].StringValue() != name || len(in["members"].ObjectValue()) != 3 {
			t.Errorf("%s: memberName %v, members %v", name, in["memberName"], in["members"])
		}
	}
}
