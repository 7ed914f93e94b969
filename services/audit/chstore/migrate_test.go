package chstore

import (
	"bytes"
	"context"
	"io"
	"net/http"
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
	if done, err := s.hasColumn(ctx, columnAdd{table: "b", column: "y", typ: "Int64"}); err != nil || done {
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

// An ADD COLUMN statement with a second action (a top-level comma) is
// refused, not skipped whole when its first column exists: the runner
// skips only a whole statement, which would drop the second action.
func TestMigrateRefusesAnAddColumnWithTwoActions(t *testing.T) {
	s, ctx := fresh(t)
	fsys := fstest.MapFS{
		"migrations/0001_a.sql": {Data: []byte("CREATE TABLE IF NOT EXISTS a (x UInt8, y Int64) ENGINE = MergeTree ORDER BY x;\n")},
		"migrations/0002_b.sql": {Data: []byte("ALTER TABLE a ADD COLUMN y Int64 DEFAULT 0, ADD COLUMN z String DEFAULT '';\n")},
	}
	err := s.migrate(ctx, fsys)
	if err == nil || !strings.Contains(err.Error(), "0002_b.sql") || !strings.Contains(err.Error(), "one action") {
		t.Fatalf("two actions in one ADD COLUMN statement: %v; want a refusal naming the file and the rule", err)
	}
	if got := versions(t, ctx, s); !reflect.DeepEqual(got, []int{1}) {
		t.Errorf("applied %v; want [1]", got)
	}
}

// A column that exists with another type than the statement declares is
// a failure, not a skip: the schema is not what the migration says.
func TestMigrateFailsOnAnExistingColumnOfAnotherType(t *testing.T) {
	s, ctx := fresh(t)
	fsys := fstest.MapFS{
		"migrations/0001_a.sql": {Data: []byte("CREATE TABLE IF NOT EXISTS a (x UInt8, y String) ENGINE = MergeTree ORDER BY x;\n")},
		"migrations/0002_b.sql": {Data: []byte("ALTER TABLE a ADD COLUMN y Int64 DEFAULT 0;\n")},
	}
	err := s.migrate(ctx, fsys)
	if err == nil || !strings.Contains(err.Error(), "String") || !strings.Contains(err.Error(), "Int64") {
		t.Fatalf("an existing column of another type: %v; want a failure naming both types", err)
	}
	// The same type, spelled with other spaces, is the same column.
	fsys["migrations/0001_a.sql"] = &fstest.MapFile{Data: []byte("CREATE TABLE IF NOT EXISTS c (x UInt8, d Decimal(18, 4)) ENGINE = MergeTree ORDER BY x;\n")}
	fsys["migrations/0002_b.sql"] = &fstest.MapFile{Data: []byte("ALTER TABLE c ADD COLUMN d Decimal(18,4) DEFAULT 0;\n")}
	s2, ctx2 := fresh(t)
	if err := s2.migrate(ctx2, fsys); err != nil {
		t.Fatalf("the same type: %v", err)
	}
}

// A column another migrator added between the check and the ALTER (two
// arbiters starting at once: no transactions, no IF NOT EXISTS) fails the
// ALTER, and the runner looks again rather than fail.
func TestMigrateToleratesAConcurrentAddColumn(t *testing.T) {
	s, ctx := fresh(t)
	const add = "ALTER TABLE a ADD COLUMN y Int64 DEFAULT 0"
	fsys := fstest.MapFS{
		"migrations/0001_a.sql": {Data: []byte("CREATE TABLE IF NOT EXISTS a (x UInt8) ENGINE = MergeTree ORDER BY x;\n")},
		"migrations/0002_b.sql": {Data: []byte(add + ";\n")},
	}
	// The other migrator runs the ALTER just before this one's reaches the
	// server.
	base := s.client.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	raced := false
	s.client = &http.Client{Timeout: s.client.Timeout, Transport: roundTrip(func(req *http.Request) (*http.Response, error) {
		if req.Body != nil && req.GetBody != nil && !raced {
			b, _ := io.ReadAll(req.Body)
			req.Body = io.NopCloser(bytes.NewReader(b))
			if string(b) == add {
				raced = true
				if err := s.exec(req.Context(), add); err != nil {
					t.Errorf("the other migrator: %v", err)
				}
			}
		}
		return base.RoundTrip(req)
	})}
	if err := s.migrate(ctx, fsys); err != nil {
		t.Fatalf("a column added meanwhile: %v", err)
	}
	if !raced {
		t.Fatal("the ALTER never ran: the race was not staged")
	}
	if got := versions(t, ctx, s); !reflect.DeepEqual(got, []int{1, 2}) {
		t.Errorf("applied %v; want [1 2]", got)
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func TestAddColumnStatements(t *testing.T) {
	for _, tc := range []struct {
		stmt, table, column, typ string
		rule                     string // the refusal's, "" for none
	}{
		{stmt: "ALTER TABLE events ADD COLUMN waited_ms Int64 DEFAULT 0 AFTER prev_session", table: "events", column: "waited_ms", typ: "Int64"},
		{stmt: "alter table t add column c Decimal(18, 4) default 0", table: "t", column: "c", typ: "Decimal(18,4)"},
		{stmt: "ALTER TABLE t ADD COLUMN c String DEFAULT 'a, b' COMMENT 'x,y'", table: "t", column: "c", typ: "String"},
		{stmt: "ALTER TABLE t ADD COLUMN c Enum8('a b' = 1, 'c' = 2)", table: "t", column: "c", typ: "Enum8('a b'=1,'c'=2)"},
		{stmt: "ALTER TABLE t ADD COLUMN c Nullable(String)\n  AFTER x", table: "t", column: "c", typ: "Nullable(String)"},
		{stmt: "ALTER TABLE t ADD COLUMN c Int64, ADD COLUMN d Int64", rule: "one action"},
		{stmt: "ALTER TABLE t ADD COLUMN c Int64 DEFAULT 0,\nDROP COLUMN x", rule: "one action"},
		{stmt: "ALTER TABLE t ADD COLUMN c DEFAULT 0", rule: "declare its type"},
	} {
		add, ok, err := parseAddColumn(tc.stmt)
		switch {
		case !ok:
			t.Errorf("%q: not read as an ADD COLUMN", tc.stmt)
		case tc.rule != "" && (err == nil || !strings.Contains(err.Error(), tc.rule)):
			t.Errorf("%q: %v; want a refusal: %s", tc.stmt, err, tc.rule)
		case tc.rule == "" && (err != nil || add != columnAdd{table: tc.table, column: tc.column, typ: tc.typ}):
			t.Errorf("%q: %+v, %v; want %s.%s of type %s", tc.stmt, add, err, tc.table, tc.column, tc.typ)
		}
	}
	if _, ok, err := parseAddColumn("CREATE TABLE a (x UInt8, y Int64) ENGINE = Memory"); ok || err != nil {
		t.Errorf("a CREATE read as an ADD COLUMN: %v, %v", ok, err)
	}
}
