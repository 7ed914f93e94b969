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

// The search never enters a directory anyone may write (a profile
// planted under /tmp by another user), and refuses a profile others may
// write: a profile names the server to trust.
func TestFindSkipsWhatOthersMayWrite(t *testing.T) {
	t.Setenv(EnvVar, "")
	shared := t.TempDir()
	if err := os.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(shared, DevPath)
	os.MkdirAll(filepath.Dir(planted), 0o755)
	os.WriteFile(planted, []byte("{}"), 0o600)
	work := filepath.Join(shared, "work", "deep")
	os.MkdirAll(work, 0o755)
	t.Chdir(work)
	_, err := Find()
	if err == nil || !strings.Contains(err.Error(), "stopped at "+shared) || strings.Contains(err.Error(), planted) {
		t.Fatalf("Find under a shared directory: %v; want the search stopped at %s without trying %s", err, shared, planted)
	}

	// A profile writable by others, in a directory of the caller's own.
	own := filepath.Join(shared, "work")
	os.MkdirAll(filepath.Join(own, ".git"), 0o755)
	loose := filepath.Join(own, DevPath)
	os.MkdirAll(filepath.Dir(loose), 0o755)
	os.WriteFile(loose, []byte("{}"), 0o600)
	os.Chmod(loose, 0o666)
	if _, err := Find(); err == nil || !strings.Contains(err.Error(), "not this user's own") {
		t.Fatalf("Find of a profile others may write: %v; want refused", err)
	}
}
