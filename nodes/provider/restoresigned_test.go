package provider_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/dr/snapshot"
	"github.com/lockplane/lockplane/dr/snapstore"
	"github.com/lockplane/lockplane/nodes/provider"
	"github.com/lockplane/lockplane/services/resourcetest"
	"github.com/minio/minio-go/v7"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
)

// signedStore is a region's snapshot store on the test MinIO with one genuine
// coord snapshot, signed by coord's key (pub), and what a forger with
// write access to the bucket can add.
type signedStore struct {
	mio    *resourcetest.MinIO
	root   *minio.Client
	region string
	pub    string
}

func newKey(t *testing.T) (ed25519.PrivateKey, string) {
	t.Helper()
	priv, pub, err := snapshot.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	k, err := snapshot.ParsePrivateKey([]byte(priv))
	if err != nil {
		t.Fatal(err)
	}
	return k, pub
}

// manifest describes a snapshot file of content taken at at, claiming
// highest as the region's highest allocated epoch.
func (sv *signedStore) manifest(t *testing.T, content string, at time.Time, highest uint32) (snapshot.Manifest, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "snap.db")
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(content))
	return snapshot.Manifest{Format: snapshot.FormatVersion, Region: sv.region, Cluster: snapshot.CoordCluster, ClusterID: "c0ffee",
		Endpoint: "https://10.0.0.1:2379", Revision: 42, HighestAllocated: highest, TakenAt: at.UTC(), Size: int64(len(content)),
		SHA256: hex.EncodeToString(sum[:]), EtcdVersion: "3.5.17"}, file
}

// put stores a snapshot signed with key, as the snapshot store does for whoever
// holds the key.
func (sv *signedStore) put(t *testing.T, ctx context.Context, m snapshot.Manifest, file string, key ed25519.PrivateKey) snapshot.Manifest {
	t.Helper()
	m, err := snapstore.Store{Client: sv.root, Region: sv.region, Signer: key}.Put(ctx, m, file)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// putUnsigned writes a snapshot and a manifest without a signature
// straight into the bucket, as a forger with write access would.
func (sv *signedStore) putUnsigned(t *testing.T, ctx context.Context, m snapshot.Manifest, content string) string {
	t.Helper()
	base := fmt.Sprintf("%s/%s-r%d-%s", m.Cluster, m.TakenAt.UTC().Format("20060102T150405.000Z"), m.Revision, m.SHA256[:12])
	m.Object = base + ".db"
	doc, _ := json.Marshal(m)
	for name, b := range map[string][]byte{base + ".db": []byte(content), base + ".json": doc} {
		if _, err := sv.root.PutObject(ctx, snapstore.Bucket(sv.region), name, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return base
}

func (sv *signedStore) inputs(snap string, trusted ...string) map[string]any {
	in := map[string]any{"vaultUrl": "http://" + sv.mio.Endpoint, "vaultAccessKey": resourcetest.MinIOUser,
		"vaultSecretKey": resourcetest.MinIOPassword, "region": sv.region, "cluster": snapshot.CoordCluster, "snapshot": snap}
	if trusted != nil {
		var ks []any
		for _, k := range trusted {
			ks = append(ks, k)
		}
		in["trustedKeys"] = ks
	}
	return in
}

// A restore uses only snapshots signed by its cluster's key (the snapshot store
// stack's): with "latest" it skips a forged newer snapshot (signed by
// another key, or not signed), restores the genuine one, and names the
// forged ones in its refused output; a forged snapshot pinned by name is
// refused by name before anything is read; and without trusted keys it
// refuses to choose at all. The forged snapshots claim a lower highest
// allocated epoch: restored, they would lower the unseal floor.
func TestARestoreUsesOnlySnapshotsSignedByItsClustersKey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sv := &signedStore{mio: resourcetest.StartMinIO(t), region: fmt.Sprintf("sg%d", time.Now().UnixNano()%1e9)}
	sv.root = sv.mio.Client(t)
	if err := (snapstore.Store{Client: sv.root, Region: sv.region}).Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	coordKey, pub := newKey(t)
	sv.pub = pub
	forgerKey, _ := newKey(t)
	now := time.Now().Add(-time.Hour)
	gm, gfile := sv.manifest(t, "genuine coord snapshot", now, 900)
	genuine := sv.put(t, ctx, gm, gfile, coordKey)
	fm, ffile := sv.manifest(t, "forged coord snapshot", now.Add(10*time.Minute), 1)
	wrong := strings.TrimSuffix(sv.put(t, ctx, fm, ffile, forgerKey).Object, ".db")
	um, _ := sv.manifest(t, "unsigned coord snapshot", now.Add(20*time.Minute), 1)
	unsigned := sv.putUnsigned(t, ctx, um, "unsigned coord snapshot")

	p := provider.New()
	create := func(name string, in map[string]any) (map[string]any, error) {
		check, err := p.Check(ctx, &pulumirpc.CheckRequest{Urn: urn("VaultSnapshot", name), News: props(t, in)})
		if err != nil {
			return nil, err
		}
		if len(check.Failures) > 0 {
			return nil, fmt.Errorf("check: %v", check.Failures)
		}
		resp, err := p.Create(ctx, &pulumirpc.CreateRequest{Urn: urn("VaultSnapshot", name), Properties: props(t, in)})
		if err != nil {
			return nil, err
		}
		return outputs(t, resp.Properties), nil
	}

	out, err := create("latest", sv.inputs(provider.Latest, sv.pub))
	if err != nil {
		t.Fatal(err)
	}
	if got := out["manifest"]; got != strings.TrimSuffix(genuine.Object, ".db") {
		t.Fatalf("latest chose %v, want the genuine %s (not a forged newer one)", got, genuine.Object)
	}
	if out["highestAllocated"] != float64(900) || out["keyId"] != genuine.Signature.KeyID {
		t.Errorf("chosen: highestAllocated %v, keyId %v; want 900 and coord's key %s", out["highestAllocated"], out["keyId"], genuine.Signature.KeyID)
	}
	refused := fmt.Sprint(out["refused"])
	for _, want := range []string{wrong + ": " + snapshot.ErrBadSignature.Error(), unsigned + ": " + snapshot.ErrUnsigned.Error()} {
		if !strings.Contains(refused, want) {
			t.Errorf("refused %s: want it to name %q", refused, want)
		}
	}

	for _, forged := range []string{wrong, unsigned} {
		_, err := create("pinned", sv.inputs(forged+".json", sv.pub))
		if err == nil || !strings.Contains(err.Error(), forged) || !strings.Contains(err.Error(), "untrusted snapshot") {
			t.Errorf("a forged snapshot pinned by name (%s): %v, want it refused by name", forged, err)
		}
	}
	if _, err := create("pinned", sv.inputs(strings.TrimSuffix(genuine.Object, ".db")+".json", sv.pub)); err != nil {
		t.Errorf("the genuine snapshot pinned by name: %v", err)
	}

	// Fail closed: no trusted key, no choice.
	if _, err := create("untrusted", sv.inputs(provider.Latest)); err == nil || !strings.Contains(err.Error(), "trustedKeys: cluster coord's snapshot signing public keys") {
		t.Errorf("a restore without trusted keys: %v, want it refused naming trustedKeys", err)
	}
	// Trusting only another key (the forger's is not the cluster's, but a
	// stack given the wrong one) restores nothing of coord's.
	_, other := newKey(t)
	if _, err := create("other", sv.inputs(provider.Latest, other)); err == nil || !strings.Contains(err.Error(), "no snapshot") {
		t.Errorf("a restore trusting another key: %v, want no snapshot", err)
	}
}

// A cluster's signing key is made once: a private key the snapshot job
// can parse, kept secret in the state, and its public key, in the text
// form a restore trusts, plain.
func TestASnapshotSigningKeyIsMadeOnceWithItsPrivateHalfSecret(t *testing.T) {
	p := provider.New()
	ctx := context.Background()
	resp, err := p.Create(ctx, &pulumirpc.CreateRequest{Urn: urn("SnapshotSigningKey", "k"),
		Properties: props(t, map[string]any{"region": "local", "cluster": "coord"})})
	if err != nil {
		t.Fatal(err)
	}
	secret := resp.Properties.Fields["privateKeyPem"].GetStructValue()
	if secret == nil || secret.Fields["4dabf18193072939515e22adb298388d"] == nil {
		t.Fatalf("privateKeyPem %v: want a secret", resp.Properties.Fields["privateKeyPem"])
	}
	key, err := snapshot.ParsePrivateKey([]byte(secret.Fields["value"].GetStringValue()))
	if err != nil {
		t.Fatal(err)
	}
	out := outputs(t, resp.Properties)
	pub, err := snapshot.ParsePublicKey(fmt.Sprint(out["publicKey"]))
	if err != nil || !pub.Equal(key.Public()) || out["keyId"] != snapshot.KeyID(pub) {
		t.Fatalf("publicKey %v keyId %v (%v): not the private key's", out["publicKey"], out["keyId"], err)
	}
	if !strings.Contains(resp.Id, snapshot.KeyID(pub)) {
		t.Errorf("id %s does not name the key", resp.Id)
	}
}
