package chstore

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/lockplane/lockplane/services/resourcetest"
)

func fresh(t *testing.T) (*Store, context.Context) {
	t.Helper()
	ch := resourcetest.StartClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return New(ch.URL(), ch.Database(t), WithCredentials(ch.Writer())), ctx
}

func versions(t *testing.T, ctx context.Context, s *Store) []int {
	t.Helper()
	rows, err := query[struct{ V int }](ctx, s, "SELECT version AS V FROM schema_migrations ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, r := range rows {
		out = append(out, r.V)
	}
	return out
}

// The repository's migrations apply, and applying them again does nothing.
func TestMigrateTwice(t *testing.T) {
	s, ctx := fresh(t)
	for range 2 {
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	files, _ := migrationFiles(migrations)
	if got := versions(t, ctx, s); len(got) != len(files) || got[0] != 1 {
		t.Errorf("schema_migrations holds versions %v after two runs, want each of %d once", got, len(files))
	}
}

// A migration runs once though it could not run twice; a failing one is
// named, stops the run, and is applied when fixed.
func TestMigrateSkipsAppliedAndNamesTheFailure(t *testing.T) {
	s, ctx := fresh(t)
	fsys := fstest.MapFS{
		"migrations/0001_a.sql": {Data: []byte("-- not idempotent on purpose\nCREATE TABLE a (x UInt8) ENGINE = Memory;\n")},
		"migrations/0002_b.sql": {Data: []byte("CREATE TABLE b (x UInt8) ENGINE = Memory;\nCREATE TABLE b2 (x NoSuchType) ENGINE = Memory;\n")},
	}
	err := s.migrate(ctx, fsys)
	if err == nil || !strings.Contains(err.Error(), "0002_b.sql") || !strings.Contains(err.Error(), "statement 2") {
		t.Fatalf("a failing migration gave %v; want an error naming 0002_b.sql, statement 2", err)
	}
	if got := versions(t, ctx, s); !reflect.DeepEqual(got, []int{1}) {
		t.Fatalf("after the failure, applied %v; want [1]", got)
	}
	fsys["migrations/0002_b.sql"] = &fstest.MapFile{Data: []byte("CREATE TABLE IF NOT EXISTS b (x UInt8) ENGINE = Memory;\nCREATE TABLE b2 (x UInt8) ENGINE = Memory;\n")}
	if err := s.migrate(ctx, fsys); err != nil {
		t.Fatal(err)
	}
	if got := versions(t, ctx, s); !reflect.DeepEqual(got, []int{1, 2}) {
		t.Errorf("after the fix, applied %v; want [1 2]", got)
	}
}

func TestMigrationFilesRefuseBadNames(t *testing.T) {
	for name, fsys := range map[string]fstest.MapFS{
		"no version":   {"migrations/events.sql": {}},
		"same version": {"migrations/0001_a.sql": {}, "migrations/1_b.sql": {}},
	} {
		if _, err := migrationFiles(fsys); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestStatements(t *testing.T) {
	got := statements("-- a comment\nCREATE TABLE a (\n  x String DEFAULT ';'\n);\n\nSELECT 1;  \n-- trailing\n")
	want := []string{"CREATE TABLE a (\n  x String DEFAULT ';'\n)", "SELECT 1"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("statements = %q, want %q", got, want)
	}
}

// A column added by a migration whose version was not recorded (the run
// stopped between the two) is not added again: 18.16 has no ADD COLUMN IF
// NOT EXISTS, and the ALTER would fail on every later run.
func TestMigrateAddsAColumnOnce(t *testing.T) {
	s, ctx := fresh(t)
	add := "ALTER TABLE a ADD COLUMN y Int64 DEFAULT 0 AFTER x;\n"
	fsys := fstest.MapFS{
		"migrations/0001_a.sql": {Data: []byte("CREATE TABLE IF NOT EXISTS a (x UInt8) ENGINE = MergeTree ORDER BY x;\n")},
		"migrations/0002_b.sql": {Data: []byte(add)},
	}
	if err := s.migrate(ctx, fsys); err != nil {
		t.Fatal(err)
	}
	// The same statement again, as a version not recorded yet.
	fsys["migrations/0003_c.sql"] = &fstest.MapFile{Data: []byte(add + "ALTER TABLE a ADD COLUMN z String DEFAULT '';\n")}
	if err := s.migrate(ctx, fsys); err != nil {
		t.Fatalf("a column added again: %v", err)
	}
	if got := versions(t, ctx, s); !reflect.DeepEqual(got, []int{1, 2, 3}) {
		t.Errorf("applied %v; want [1 2 3]", got)
	}
	cols, err := query[struct {
		Name string `json:"name"`
	}](ctx, s, "DESCRIBE TABLE a")
	var names []string
	for _, c := range cols {
		names = append(names, c.Name)
	}
	if err != nil || !reflect.DeepEqual(names, []string{"x", "y", "z"}) {
		t.Errorf("columns %v, %v; want x, y, z", names, err)
	}
	// A statement that is no ADD COLUMN, or names another table, still runs.
	if done, err := s.columnAdded(ctx, "ALTER TABLE b ADD COLUMN y Int64"); err != nil || done {
		t.Errorf("another table's column: %v, %v", done, err)
	}
}

// A store made before waits (version 1 only) keeps its rows through the
// migration that adds waited_ms; they read as not having waited.
func TestAStoreBeforeWaitsMigrates(t *testing.T) {
	s, ctx := fresh(t)
	first, err := migrations.ReadFile("migrations/0001_events.sql")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.migrate(ctx, fstest.MapFS{"migrations/0001_events.sql": {Data: first}}); err != nil {
		t.Fatal(err)
	}
	if err := s.exec(ctx, `INSERT INTO events (cluster_id, cluster, revision, key, kind, at_ms, namespace, class, identity, session, ingested)
		VALUES ('c0ffee', 'coord', 7, 'team-a/old/1', 'handoff', 1700000000000, 'team-a', 'default', 'bob', 5, 1)`); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := s.ByKey(ctx, "team-a/old/1", time.Time{}, 10)
	if err != nil || len(got) != 1 || got[0].Kind != "handoff" || got[0].WaitedMs != 0 || got[0].Identity != "bob" {
		t.Fatalf("the old row after the migration: %+v, %v", got, err)
	}
}
