package provider

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
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

// PasswordInputs is a random secret made once and kept in the stack's
// state, encrypted as a Pulumi secret: a service's password that no
// operator has to choose, store or pass on a command line. It is made
// again only when the resource is replaced (the services given it restart).
type PasswordInputs struct {
	// Bytes of randomness, shown as twice as many hex digits.
	Bytes int `json:"bytes"`
}

func init() {
	register("Password", spec[PasswordInputs]{
		Validate: func(in *PasswordInputs) error {
			if in.Bytes < 16 || in.Bytes > 64 {
				return fmt.Errorf("bytes: %d must be between 16 and 64", in.Bytes)
			}
			return nil
		},
		Create: func(_ context.Context, _ *Env, in *PasswordInputs) (string, map[string]any, error) {
			// The ID is public; the password only ever an output.
			return "password-" + randomHex(8), map[string]any{"password": randomHex(in.Bytes)}, nil
		},
		Secrets: []string{"password"},
	})
}
