// Package resourcetest starts the real servers that fences and the audit
// store are tested against: PostgreSQL 15 and ClickHouse 18.16 from Debian
// and MinIO built from the tools module, each on free loopback ports, torn
// down when the test binary ends.
//
// In CI (CI=true) a missing server fails the test loudly; elsewhere the
// test is skipped with a message saying how to install it.
package resourcetest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/lockplane/lockplane/services/loopport"
)

// Unavailable fails in CI and skips elsewhere: what is missing (err), and
// how to get it.
func Unavailable(t testing.TB, what, how string, err error) {
	t.Helper()
	msg := fmt.Sprintf("%s is not available (%v); %s", what, err, how)
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// NotShort skips t under -short: it needs what (a server, a cluster or
// test hosts), and `make test-short` runs only what needs none.
func NotShort(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: needs %s (make test runs it)", what)
	}
}

// FreePort is a TCP port on 127.0.0.1 that was free a moment ago, for a
// child process to listen on (loopport.ReserveOn says how it is chosen).
func FreePort() (int, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// FreePorts is n distinct such ports: take a server's ports together, so
// that none is drawn twice.
func FreePorts(n int) ([]int, error) { return loopport.Reserve(n) }

// FreePortsOn is n distinct ports free on host, another loopback address.
func FreePortsOn(host string, n int) ([]int, error) { return loopport.ReserveOn(host, n) }

// RepoRoot is the directory holding go.mod, where bin/ is.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "Pulumi.yaml")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no repository root above the working directory")
		}
		dir = parent
	}
}
