package provider

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
)

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("provider: no randomness: " + err.Error())
	}
	return hex.EncodeToString(b)
}

// ClusterTokenInputs names a new etcd cluster's initial-cluster-token. It
// is random and made once: etcd derives the cluster ID from it and the
// member URLs, so a cluster destroyed and made again on the same hosts
// gets a new ID, and its epoch record cannot be mistaken for the old one's
// (ADR-03).
type ClusterTokenInputs struct {
	Prefix string `json:"prefix"`
}

func init() {
	register("ClusterToken", spec[ClusterTokenInputs]{
		Validate: func(in *ClusterTokenInputs) error {
			if in.Prefix == "" {
				return errors.New("prefix: is required")
			}
			return nil
		},
		Create: func(_ context.Context, _ *Env, in *ClusterTokenInputs) (string, map[string]any, error) {
			tok := in.Prefix + "-" + randomHex(8)
			return tok, map[string]any{"token": tok}, nil
		},
	})
}
