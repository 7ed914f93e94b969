package chserver

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/audit/audittest"
	"github.com/lockplane/lockplane/services/audit/chstore"
)

// withoutReadonly is Users with the reader's profile left writable: the
// broken variant the readonly check must catch.
func withoutReadonly(p Passwords, clients ...string) string {
	return strings.Replace(Users(p, clients...), "<readonly>2</readonly>", "", 1)
}

// startFor starts a server with the users file users makes, stopped when
// the test ends. Without clickhouse-server the test fails in CI and is
// skipped elsewhere (resourcetest's rule; it imports this package).
func startFor(t *testing.T, users func(Passwords, ...string) string) *Server {
	t.Helper()
	if !Installed() {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed", Bin)
		}
		t.Skipf("%s is not installed; run make clickhouse", Bin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := start(ctx, t.TempDir(), users)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// post sends one statement as user, with the URL's query string params,
// and returns the HTTP status and body.
func post(t *testing.T, s *Server, user, password, params, stmt string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL()+"/?"+params, strings.NewReader(stmt))
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// readerWrites tries, as the reader, every kind of write to a migrated
// store and returns the statements ClickHouse accepted: none when the
// reader is read-only.
func readerWrites(t *testing.T, s *Server, ctx context.Context, db string) []string {
	t.Helper()
	user, password := s.Reader()
	var accepted []string
	// chstore's own write paths, as the reader.
	reader := chstore.New(s.URL(), db, chstore.WithCredentials(user, password))
	if err := reader.Insert(ctx, audittest.EveryKind(time.Now())); err == nil {
		accepted = append(accepted, "chstore Insert")
	}
	if err := chstore.New(s.URL(), "reader_migrated", chstore.WithCredentials(user, password)).Migrate(ctx); err == nil {
		accepted = append(accepted, "chstore Migrate")
	}
	// Each statement by hand, the drops last.
	insert := "INSERT INTO " + db + ".events (cluster_id, revision, key) VALUES ('x', 1, 'k')"
	for _, c := range []struct{ params, stmt string }{
		{"", insert},
		// Lifting its own readonly for the request.
		{"readonly=0", insert},
		{"", "CREATE TABLE " + db + ".extra (a UInt8) ENGINE = MergeTree ORDER BY a"},
		{"", "CREATE DATABASE reader_made"},
		{"", "ALTER TABLE " + db + ".events DELETE WHERE 1"},
		{"", "DROP TABLE " + db + ".schema_migrations"},
		{"", "DROP DATABASE " + db},
	} {
		stmt := strings.TrimPrefix(c.params+" ", " ") + c.stmt
		if status, body := post(t, s, user, password, c.params, c.stmt); status == http.StatusOK {
			accepted = append(accepted, stmt)
		} else if !strings.Contains(body, "readonly mode") {
			t.Errorf("reader: %s: HTTP %d %s; want a refusal in readonly mode", stmt, status, body)
		}
	}
	return accepted
}

// migrated is a store with every kind of event in it, made by the writer.
func migrated(t *testing.T, s *Server, ctx context.Context, db string) []audit.Event {
	t.Helper()
	w := chstore.New(s.URL(), db, chstore.WithCredentials(s.Writer()))
	if err := w.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	evs := audittest.EveryKind(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	if err := w.Insert(ctx, evs); err != nil {
		t.Fatal(err)
	}
	return evs
}

// The reader can write nothing: every INSERT, DDL or lifting of readonly
// is refused by ClickHouse. The same checks against a users file whose
// reader is not read-only find the writes accepted, so they would fail if
// the profile were lost.
func TestTheReaderCannotWrite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := startFor(t, Users)
	migrated(t, s, ctx, "audit")
	if got := readerWrites(t, s, ctx, "audit"); len(got) > 0 {
		t.Errorf("the reader wrote: %q", got)
	}

	broken := startFor(t, withoutReadonly)
	migrated(t, broken, ctx, "audit")
	if got := readerWrites(t, broken, ctx, "audit"); len(got) == 0 {
		t.Error("with a writable reader the checks found no write accepted: they cannot catch a lost readonly")
	}
}

// Every audit query and report answers as the reader: readonly 2 lets
// chstore's per-request settings through (readonly 1 would refuse them).
func TestTheReaderAnswersTheAuditQueries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := startFor(t, Users)
	evs := migrated(t, s, ctx, "audit")
	r := chstore.New(s.URL(), "audit", chstore.WithCredentials(s.Reader()))
	got, err := r.ByKey(ctx, evs[1].Key, time.Time{}, 100)
	if err != nil || len(got) == 0 {
		t.Fatalf("ByKey as the reader: %d events, %v", len(got), err)
	}
	if _, err := r.ByIdentity(ctx, "alice", time.Time{}, 100); err != nil {
		t.Errorf("ByIdentity: %v", err)
	}
	if _, err := r.ByNamespaceClass(ctx, "payments", "", time.Time{}, 100); err != nil {
		t.Errorf("ByNamespaceClass: %v", err)
	}
	if _, err := r.ExpiriesList(ctx, time.Time{}, 100); err != nil {
		t.Errorf("ExpiriesList: %v", err)
	}
	if _, err := r.Expiries(ctx, time.Time{}); err != nil {
		t.Errorf("Expiries: %v", err)
	}
	if _, err := r.Contention(ctx, time.Time{}); err != nil {
		t.Errorf("Contention: %v", err)
	}
	if _, err := r.Cost(ctx, time.Time{}); err != nil {
		t.Errorf("Cost: %v", err)
	}
	if _, err := r.GrantsByClass(ctx, time.Time{}); err != nil {
		t.Errorf("GrantsByClass: %v", err)
	}
	if _, err := r.LastRevision(ctx, "c0ffee"); err != nil {
		t.Errorf("LastRevision: %v", err)
	}
}

// A wrong password, the other user's password, and no credentials at all
// (ClickHouse's default user, which the store does not have) are refused,
// and the refusal does not carry the password that was tried.
func TestWrongCredentialsAreRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := startFor(t, Users)
	_, writerPassword := s.Writer()
	for name, opt := range map[string]chstore.Option{
		"wrong password":             chstore.WithCredentials(ReaderUser, "not-the-password"),
		"the writer's to the reader": chstore.WithCredentials(ReaderUser, writerPassword),
		"no credentials":             func(*chstore.Store) {},
	} {
		_, err := chstore.New(s.URL(), "default", opt).LastRevision(ctx, "c0ffee")
		var chErr *chstore.Error
		if !errors.As(err, &chErr) || chErr.Status == http.StatusOK {
			t.Errorf("%s: %v; want ClickHouse's refusal", name, err)
			continue
		}
		if strings.Contains(err.Error(), "not-the-password") || strings.Contains(err.Error(), writerPassword) {
			t.Errorf("%s: the error carries the password: %v", name, err)
		}
	}
	if status, body := post(t, s, "default", "", "", "SELECT 1"); status == http.StatusOK || !strings.Contains(body, "Unknown user default") {
		t.Errorf("the default user: HTTP %d %s; want it unknown", status, body)
	}
}
