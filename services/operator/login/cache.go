package login

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"time"
)

// ErrNoToken: there is no cached token. ErrExpired: the cached token's
// lifetime is over. Both say what to do.
var (
	ErrNoToken = errors.New("no operator token cached: run lockctl login")
	ErrExpired = errors.New("operator token expired: run lockctl login")
)

// DefaultCachePath is <user cache dir>/lockplane/operator-token.json
// (~/.cache/lockplane/... on Linux, honouring XDG_CACHE_HOME).
func DefaultCachePath() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("login: no cache directory (give a path): %w", err)
	}
	return filepath.Join(dir, "lockplane", "operator-token.json"), nil
}

// Cached returns the token cached at path if it has not expired.
func Cached(path string) (Token, error) { return cachedAt(path, time.Now()) }

func cachedAt(path string, now time.Time) (Token, error) {
	b, err := readPrivate(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Token{}, fmt.Errorf("%w (%s)", ErrNoToken, path)
	}
	if err != nil {
		return Token{}, err
	}
	var t Token
	if err := json.Unmarshal(b, &t); err != nil || t.IDToken == "" || t.Expiry.IsZero() {
		return Token{}, fmt.Errorf("login: %s is not a token cache file; run lockctl login", path)
	}
	if !now.Before(t.Expiry) {
		return Token{}, fmt.Errorf("%w (it expired at %s)", ErrExpired, t.Expiry.Local().Format(time.RFC3339))
	}
	return t, nil
}

func readPrivate(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("login: %s is readable or writable by others (mode %v); remove it and run lockctl login", path, fi.Mode().Perm())
	}
	return os.ReadFile(path)
}

// store writes t to path atomically, mode 0600, creating the directory 0700.
func store(path string, t Token) error {
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("login: token cache directory: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".operator-token-*")
	if err != nil {
		return fmt.Errorf("login: token cache: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("login: token cache: %w", err)
	}
	return nil
}

// Logout removes the cached token; a missing file is not an error.
func Logout(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("login: %w", err)
	}
	return nil
}
