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

// PasswordInputs make a random password (32 bytes, in hex), made once and
// kept secret in the state: the audit store's users' passwords when the
// stack's configuration gives none. Purpose names it in the state only.
type PasswordInputs struct {
	Purpose string `json:"purpose"`
}

func init() {
	register("Password", spec[PasswordInputs]{
		Validate: func(in *PasswordInputs) error {
			if in.Purpose == "" {
				return errors.New("purpose: is required")
			}
			return nil
		},
		Create: func(_ context.Context, _ *Env, in *PasswordInputs) (string, map[string]any, error) {
			// The ID is not derived from the password: IDs are not secret.
			return in.Purpose + "-" + randomHex(4), map[string]any{"password": randomHex(32)}, nil
		},
		Secrets: []string{"password"},
	})
}
