package etcdembed

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/lockplane/lockplane/services/etcdauth"
)

// jwtAuthToken writes a signing key for the cluster's auth tokens under dir
// and returns etcd's --auth-token value for it. etcd's default "simple"
// tokens carry the Raft index they were issued at, and a member waits for
// its own index to reach it before it answers: a client holding a token
// from before a rebuild (a new cluster, indexes from 1) hangs until its
// deadline on every call. A signed token is checked at once, and the key
// outlives a Rebuild because it is kept beside the members' data, not in it.
func jwtAuthToken(dir string, ttl time.Duration) (string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", fmt.Errorf("etcdembed: auth token key: %w", err)
	}
	priv, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", fmt.Errorf("etcdembed: auth token key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return "", fmt.Errorf("etcdembed: auth token key: %w", err)
	}
	privPath, pubPath := filepath.Join(dir, "auth-token.key"), filepath.Join(dir, "auth-token.pub")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("etcdembed: auth token key: %w", err)
	}
	if err := os.WriteFile(privPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: priv}), 0o600); err != nil {
		return "", fmt.Errorf("etcdembed: auth token key: %w", err)
	}
	if err := os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
		return "", fmt.Errorf("etcdembed: auth token key: %w", err)
	}
	return etcdauth.AuthTokenFlag(pubPath, privPath, ttl), nil
}
