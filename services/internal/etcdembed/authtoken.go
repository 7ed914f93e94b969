package etcdembed

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/lockplane/lockplane/services/etcdauth"
)

// jwtAuthToken writes a secret key for the cluster's auth tokens under dir
// and returns etcd's --auth-token value for it (etcdauth.AuthTokenFlag).
// etcd's default "simple" tokens carry the Raft index they were issued at,
// and a member waits for its own index to reach it before it answers: a
// client holding a token from before a rebuild (a new cluster, indexes
// from 1) hangs until its deadline on every call. A signed token is
// checked at once, and the key outlives a Rebuild because it is kept
// beside the members' data, not in it.
func jwtAuthToken(dir string, ttl time.Duration) (string, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("etcdembed: auth token key: %w", err)
	}
	path := filepath.Join(dir, "auth-token.key")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("etcdembed: auth token key: %w", err)
	}
	if err := os.WriteFile(path, []byte(hex.EncodeToString(key)), 0o600); err != nil {
		return "", fmt.Errorf("etcdembed: auth token key: %w", err)
	}
	return etcdauth.AuthTokenFlag(path, ttl), nil
}
