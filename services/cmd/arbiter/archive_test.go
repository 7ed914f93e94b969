package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/audit/chstore"
	"github.com/lockplane/lockplane/services/resourcetest"
)

// Every archive flag is checked at start, each refusal naming the flag and
// its rule, and a credentials file's content is never quoted.
func TestArchiveFlagsAreCheckedAtStart(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	bad := filepath.Join(dir, "bad")
	os.WriteFile(good, []byte("archive access:supersecret\n"), 0o600)
	os.WriteFile(bad, []byte("access\nsupersecret\n"), 0o600)
	store := chstore.New("http://127.0.0.1:1", "lockplane")
	base := archiveFlags{url: "http://127.0.0.1:9000", credentials: good, historyBucket: "h", recordsBucket: "r",
		recordsMode: "COMPLIANCE", historyDays: 365, recordsYears: 7}
	for _, tc := range []struct {
		name, want string
		edit       func(*archiveFlags)
		noStore    bool
	}{
		{"no audit store", "--audit-store", func(*archiveFlags) {}, true},
		{"not a URL", "--archive:", func(a *archiveFlags) { a.url = "minio:9000" }, false},
		{"a path", "--archive:", func(a *archiveFlags) { a.url = "http://minio:9000/bucket" }, false},
		{"credentials in the URL", "--archive:", func(a *archiveFlags) { a.url = "http://u:p@minio:9000" }, false},
		{"no credentials", "--archive-credentials: required", func(a *archiveFlags) { a.credentials = "" }, false},
		{"one line", "--archive-credentials: ", func(a *archiveFlags) { a.credentials = bad }, false},
		{"mode", "--archive-records-mode", func(a *archiveFlags) { a.recordsMode = "forever" }, false},
		{"days", "--archive-history-days", func(a *archiveFlags) { a.historyDays = 0 }, false},
		{"ca without https", "--archive-ca", func(a *archiveFlags) { a.ca = good }, false},
		{"same buckets", "distinct buckets", func(a *archiveFlags) { a.recordsBucket = "h" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, s := base, store
			tc.edit(&a)
			if tc.noStore {
				s = nil
			}
			_, err := a.open(s, slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("open: %v, want a refusal naming %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "supersecret") || strings.Contains(err.Error(), "u:p@") {
				t.Fatalf("the refusal quotes a secret: %v", err)
			}
		})
	}
	if a, err := base.open(store, slog.New(slog.DiscardHandler)); err != nil || a == nil {
		t.Fatalf("good flags: %v", err)
	}
	if _, err := (archiveFlags{credentials: good}).open(store, nil); err == nil || !strings.Contains(err.Error(), "without --archive") {
		t.Fatalf("--archive-credentials alone: %v, want a refusal", err)
	}
	if a, err := (archiveFlags{}).open(nil, nil); err != nil || a != nil {
		t.Fatalf("no --archive: %v, %v; want no archive and no error", a, err)
	}
}

// The flags reach a real MinIO with the file's credentials: the archive
// makes its buckets, the records one under object lock.
func TestTheArchiveFlagsReachMinIO(t *testing.T) {
	m := resourcetest.StartMinIO(t)
	creds := filepath.Join(t.TempDir(), "archive")
	os.WriteFile(creds, []byte("archive "+resourcetest.MinIOUser+":"+resourcetest.MinIOPassword+"\n"), 0o600)
	a, err := archiveFlags{url: "http://" + m.Endpoint, credentials: creds, historyBucket: m.Bucket(t) + "-h", recordsBucket: m.Bucket(t) + "-r",
		recordsMode: "GOVERNANCE", historyDays: 1, recordsYears: 1}.open(chstore.New("http://127.0.0.1:1", "x"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.EnsureBuckets(ctx); err != nil {
		t.Fatal(err)
	}
}
