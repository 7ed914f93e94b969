package snapstore_test

import (
	"crypto/ed25519"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/dr/snapshot"
	"github.com/lockplane/lockplane/dr/snapstore"
	"github.com/lockplane/lockplane/services/epoch"
)

// testKeys are a signing key for each cluster the tests snapshot, made
// once per run.
var testKeys = func() map[string]ed25519.PrivateKey {
	keys := map[string]ed25519.PrivateKey{}
	for _, c := range []string{snapshot.CoordCluster, "s0", "entity-0"} {
		priv, _, err := snapshot.GenerateKey()
		if err != nil {
			panic(err)
		}
		k, err := snapshot.ParsePrivateKey([]byte(priv))
		if err != nil {
			panic(err)
		}
		keys[c] = k
	}
	return keys
}()

// keyed is v signing as coord's snapshot job and trusting every test
// cluster's own key, as a restore given the store stack's keys does.
func keyed(v snapstore.Store) snapstore.Store {
	return signingAs(v, snapshot.CoordCluster)
}

// signingAs is v signing with cluster's key, trusting each cluster's own.
func signingAs(v snapstore.Store, cluster string) snapstore.Store {
	v.Signer = testKeys[cluster]
	v.Trusted = snapstore.Keys{}
	for c, k := range testKeys {
		v.Trusted[c] = []ed25519.PublicKey{k.Public().(ed25519.PublicKey)}
	}
	return v
}

func TestASignatureCoversEveryFieldOfTheManifest(t *testing.T) {
	m, _ := handMade(t, "sig", "content")
	m.Object = "coord/x.db"
	if err := m.Sign(testKeys[snapshot.CoordCluster]); err != nil {
		t.Fatal(err)
	}
	coord := []ed25519.PublicKey{testKeys[snapshot.CoordCluster].Public().(ed25519.PublicKey)}
	shard := []ed25519.PublicKey{testKeys["s0"].Public().(ed25519.PublicKey)}
	if err := m.CheckSignature(coord); err != nil {
		t.Fatalf("signed by coord's key, checked against it: %v", err)
	}
	if err := m.CheckSignature(shard); err == nil {
		t.Error("coord's manifest checked against a shard's key: passed")
	}
	for field, edit := range map[string]func(*snapshot.Manifest){
		"format":            func(m *snapshot.Manifest) { m.Format++ },
		"region":            func(m *snapshot.Manifest) { m.Region = "other" },
		"cluster":           func(m *snapshot.Manifest) { m.Cluster = "s0" },
		"cluster_id":        func(m *snapshot.Manifest) { m.ClusterID = "1" },
		"endpoint":          func(m *snapshot.Manifest) { m.Endpoint = "https://elsewhere:2379" },
		"revision":          func(m *snapshot.Manifest) { m.Revision++ },
		"epoch":             func(m *snapshot.Manifest) { m.Epoch = &epoch.Record{Epoch: 1} },
		"highest_allocated": func(m *snapshot.Manifest) { m.HighestAllocated = 1 },
		"taken_at":          func(m *snapshot.Manifest) { m.TakenAt = m.TakenAt.Add(time.Hour) },
		"size":              func(m *snapshot.Manifest) { m.Size++ },
		"sha256":            func(m *snapshot.Manifest) { m.SHA256 = strings.Repeat("0", 64) },
		"etcd_version":      func(m *snapshot.Manifest) { m.EtcdVersion = "3.0.0" },
		"object":            func(m *snapshot.Manifest) { m.Object = "coord/y.db" },
		"signature.key_id":  func(m *snapshot.Manifest) { s := *m.Signature; s.KeyID = "0000000000000000"; m.Signature = &s },
	} {
		tampered := m
		edit(&tampered)
		if err := tampered.CheckSignature(coord); err == nil {
			t.Errorf("%s changed after signing: passed", field)
		}
	}
	unsigned := m
	unsigned.Signature = nil
	if err := unsigned.CheckSignature(coord); err == nil {
		t.Error("no signature: passed")
	}
}
