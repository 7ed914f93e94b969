package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Without MinIO beside it (this test binary has none), dev says in one
// line which make target gets audit's dependencies; that target exists and
// installs ClickHouse and builds MinIO.
func TestDevNamesOneTargetForAuditsDependencies(t *testing.T) {
	_, _, off := startArchive(context.Background(), t.TempDir(), nil, nil)
	m := regexp.MustCompile(`run make ([a-z-]+)`).FindStringSubmatch(off)
	if m == nil || m[1] != "audit-deps" || strings.Contains(off, "\n") {
		t.Fatalf("off without MinIO: %q; want one line naming make audit-deps", off)
	}
	// A dry run with an empty BIN: what a fresh machine would run.
	out, err := exec.Command("make", "-n", "-C", filepath.Join("..", "..", ".."), m[1], "BIN="+t.TempDir()).CombinedOutput()
	if err != nil {
		t.Fatalf("make -n %s: %v\n%s", m[1], err, out)
	}
	for _, want := range []string{"clickhouse-server", "github.com/minio/minio"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("make -n %s does not mention %s:\n%s", m[1], want, out)
		}
	}
}
