package profile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The dev profile is found from any directory inside the repository, and
// the search stops at the repository's root, naming every path it tried.
func TestFindWalksUpToTheRepositoryRoot(t *testing.T) {
	t.Setenv(EnvVar, "")
	outside := t.TempDir()
	repo := filepath.Join(outside, "repo")
	deep := filepath.Join(repo, "services", "client", "profile")
	for _, d := range []string{filepath.Join(repo, ".git"), deep} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A profile above the repository is not this repository's.
	above := filepath.Join(outside, DevPath)
	os.MkdirAll(filepath.Dir(above), 0o755)
	os.WriteFile(above, []byte("{}"), 0o600)
	t.Chdir(deep)

	_, err := Find()
	if err == nil {
		t.Fatal("found a profile above the repository's root")
	}
	for _, d := range []string{deep, repo} {
		if want := filepath.Join(d, DevPath); !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if strings.Contains(err.Error(), above) {
		t.Errorf("error %q names a path above the repository", err)
	}

	dev := filepath.Join(repo, DevPath)
	os.MkdirAll(filepath.Dir(dev), 0o755)
	os.WriteFile(dev, []byte("{}"), 0o600)
	got, err := Find()
	if err != nil || got != dev {
		t.Fatalf("Find from %s = %q, %v; want %s", deep, got, err, dev)
	}
}
