package provider

import (
	"context"
	"fmt"

	"github.com/lockplane/lockplane/dr/snapshot"
	"github.com/lockplane/lockplane/dr/snapstore"
)

// SnapshotSigningKeyInputs make one cluster's snapshot signing key
// (snapshot.GenerateKey), made once and kept in the store stack's state:
// the private key (secret) goes to that cluster's snapshot jobs only, the
// public key to every restore, which trusts no snapshot it does not
// verify. The state that holds it is the store stack's, which no region
// host can write, so it is the trust anchor (docs/dr.md).
type SnapshotSigningKeyInputs struct {
	Region  string `json:"region"`
	Cluster string `json:"cluster"`
}

func init() {
	register("SnapshotSigningKey", spec[SnapshotSigningKeyInputs]{
		Validate: func(in *SnapshotSigningKeyInputs) error {
			if err := snapstore.CheckName("region", in.Region); err != nil {
				return err
			}
			return snapstore.CheckName("cluster", in.Cluster)
		},
		Create: func(_ context.Context, _ *Env, in *SnapshotSigningKeyInputs) (string, map[string]any, error) {
			priv, pub, err := snapshot.GenerateKey()
			if err != nil {
				return "", nil, fmt.Errorf("snapshot signing key of %s/%s: %w", in.Region, in.Cluster, err)
			}
			k, err := snapshot.ParsePublicKey(pub)
			if err != nil {
				return "", nil, err
			}
			return in.Region + "-" + in.Cluster + "-" + snapshot.KeyID(k),
				map[string]any{"privateKeyPem": priv, "publicKey": pub, "keyId": snapshot.KeyID(k)}, nil
		},
		Secrets: []string{"privateKeyPem"},
	})
}
