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

// The reader gets a deployed vault stack's outputs, secrets shown, from
// the region's backend, and names the `up` to run for a stack that is
// not there.
func TestTheVaultReaderReadsTheVaultStacksOutputs(t *testing.T) {
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
	// A vault stack's exports, as runVault makes them, and nothing else.
	vault := func(pctx *pulumi.Context) error {
		pctx.Export("vaultUrl", pulumi.String("https://10.231.0.30:9000"))
		pctx.Export("vaultCaCertPem", pulumi.String("VAULT CA"))
		pctx.Export("vaultRegions", pulumi.ToSecret(pulumi.Map{"local": pulumi.Map{"bucket": pulumi.String("lockplane-snapshots-local"),
			"restorer": pulumi.String("restore-local"), "restorerPassword": pulumi.String("rp"),
			"clusters": pulumi.Map{"coord": pulumi.Map{"storer": pulumi.String("snap-local-coord"), "storerPassword": pulumi.String("sp"),
				"signingKey": pulumi.String("PRIVATE"), "publicKey": pulumi.String("ed25519:PUB")}}}}))
		return nil
	}
	s, err := auto.UpsertStackInlineSource(ctx, "test-vault", "lockplane", vault, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Up(ctx); err != nil {
		t.Fatal(err)
	}
	// The region's stack is the workspace's current one while its program
	// reads the vault; the read must not select another.
	if _, err := auto.UpsertStackInlineSource(ctx, "test-region", "lockplane", func(*pulumi.Context) error { return nil }, opts...); err != nil {
		t.Fatal(err)
	}
	got, err := vaultReader(opts)(ctx, "test-vault")
	if err != nil {
		t.Fatal(err)
	}
	want := program.VaultRegion{Bucket: "lockplane-snapshots-local", Restorer: "restore-local", RestorerPassword: "rp",
		Clusters: map[string]program.VaultCluster{"coord": {Storer: "snap-local-coord", StorerPassword: "sp", SigningKey: "PRIVATE", PublicKey: "ed25519:PUB"}}}
	if got.URL != "https://10.231.0.30:9000" || got.CACertPem != "VAULT CA" || len(got.Regions) != 1 || !reflect.DeepEqual(got.Regions["local"], want) {
		t.Fatalf("read %+v", got)
	}
	ws, err := auto.NewLocalWorkspace(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if cur, err := ws.Stack(ctx); err != nil || cur == nil || cur.Name != "test-region" {
		t.Fatalf("the current stack after reading the vault: %+v (%v), want test-region still", cur, err)
	}
	if _, err := vaultReader(opts)(ctx, "no-vault"); err == nil || !strings.Contains(err.Error(), "run `lockplane up --stack no-vault` first") {
		t.Fatalf("a stack not in the backend: %v", err)
	}
}
