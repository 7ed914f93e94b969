package main

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/infra/program"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// The reader gets a deployed store stack's outputs, secrets shown, from
// the region's backend, and names the `up` to run for a stack that is
// not there.
func TestTheStoreReaderReadsTheStoreStacksOutputs(t *testing.T) {
	root, _ := filepath.Abs("../../..")
	if _, err := os.Stat(filepath.Join(root, "bin", "pulumi")); err != nil {
		t.Skip("bin/pulumi is missing: run `make infra-tools`")
	}
	cmd, err := auto.NewPulumiCommand(&auto.PulumiCommandOptions{Root: root, SkipVersionCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "state"), 0o700)
	opts := []auto.LocalWorkspaceOption{auto.WorkDir(dir), auto.Pulumi(cmd), auto.SecretsProvider("passphrase"), auto.EnvVars(map[string]string{
		"PULUMI_BACKEND_URL": "file://" + filepath.Join(dir, "state"), "PULUMI_HOME": filepath.Join(dir, "home"),
		"PULUMI_SKIP_UPDATE_CHECK": "true", "PULUMI_CONFIG_PASSPHRASE": "test"})}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A store stack's exports, as runStore makes them, and nothing else;
	// prefix "vault" is how a store stack deployed before the rename has them.
	exports := func(prefix string) pulumi.RunFunc {
		return func(pctx *pulumi.Context) error {
			pctx.Export(prefix+"Url", pulumi.String("https://10.231.0.30:9000"))
			pctx.Export(prefix+"CaCertPem", pulumi.String("STORE CA"))
			pctx.Export(prefix+"Regions", pulumi.ToSecret(pulumi.Map{"local": pulumi.Map{"bucket": pulumi.String("lockplane-snapshots-local"),
				"restorer": pulumi.String("restore-local"), "restorerPassword": pulumi.String("rp"),
				"clusters": pulumi.Map{"coord": pulumi.Map{"storer": pulumi.String("snap-local-coord"), "storerPassword": pulumi.String("sp"),
					"signingKey": pulumi.String("PRIVATE"), "publicKey": pulumi.String("ed25519:PUB")}}}}))
			return nil
		}
	}
	for stack, prefix := range map[string]string{"test-snapstore": "store", "test-old-snapstore": "vault"} {
		s, err := auto.UpsertStackInlineSource(ctx, stack, "lockplane", exports(prefix), opts...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Up(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The region's stack is the workspace's current one while its program
	// reads the snapshot store; the read must not select another.
	if _, err := auto.UpsertStackInlineSource(ctx, "test-region", "lockplane", func(*pulumi.Context) error { return nil }, opts...); err != nil {
		t.Fatal(err)
	}
	want := program.StoreRegion{Bucket: "lockplane-snapshots-local", Restorer: "restore-local", RestorerPassword: "rp",
		Clusters: map[string]program.StoreCluster{"coord": {Storer: "snap-local-coord", StorerPassword: "sp", SigningKey: "PRIVATE", PublicKey: "ed25519:PUB"}}}
	for _, stack := range []string{"test-snapstore", "test-old-snapstore"} {
		got, err := storeReader(opts)(ctx, stack)
		if err != nil {
			t.Fatal(err)
		}
		if got.URL != "https://10.231.0.30:9000" || got.CACertPem != "STORE CA" || len(got.Regions) != 1 || !reflect.DeepEqual(got.Regions["local"], want) {
			t.Fatalf("%s: read %+v", stack, got)
		}
	}
	ws, err := auto.NewLocalWorkspace(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if cur, err := ws.Stack(ctx); err != nil || cur == nil || cur.Name != "test-region" {
		t.Fatalf("the current stack after reading the store stack: %+v (%v), want test-region still", cur, err)
	}
	if _, err := storeReader(opts)(ctx, "no-snapstore"); err == nil || !strings.Contains(err.Error(), "run `lockplane up --stack no-snapstore` first") {
		t.Fatalf("a stack not in the backend: %v", err)
	}
}
