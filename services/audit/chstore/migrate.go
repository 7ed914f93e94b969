package chstore

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// migrations are the schema's versions, NNNN_name.sql, applied in order.
// A file holds statements each ending with ';' at the end of a line.
// ClickHouse has no transactions: a file that fails halfway is applied
// again from its start, so every statement must be idempotent (IF NOT
// EXISTS and the like). 18.16 has no ADD COLUMN IF NOT EXISTS: a
// statement `ALTER TABLE t ADD COLUMN c ...` is skipped when t already has
// column c, so write columns one statement each.
//
//go:embed migrations/*.sql
var migrations embed.FS

var (
	migrationName = regexp.MustCompile(`^(\d+)_[a-z0-9_]+\.sql$`)
	identifier    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	addColumn     = regexp.MustCompile(`(?is)^\s*ALTER\s+TABLE\s+([A-Za-z_][A-Za-z0-9_]*)\s+ADD\s+COLUMN\s+([A-Za-z_][A-Za-z0-9_]*)\s`)
)

// Migrate creates the database if it does not exist and applies, in
// order, every migration not yet recorded in its schema_migrations table.
// Running it again changes nothing. A failing migration stops it with an
// error naming the file; the versions before it stay applied.
func (s *Store) Migrate(ctx context.Context) error {
	return s.migrate(ctx, migrations)
}

func (s *Store) migrate(ctx context.Context, fsys fs.FS) error {
	files, err := migrationFiles(fsys)
	if err != nil {
		return err
	}
	if !identifier.MatchString(s.database) {
		return fmt.Errorf("chstore: database name %q is not a plain identifier", s.database)
	}
	server := *s
	server.database = "" // the database may not exist yet
	if err := server.exec(ctx, "CREATE DATABASE IF NOT EXISTS "+s.database); err != nil {
		return err
	}
	if err := s.exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations
		(version UInt32, name String, applied DateTime)
		ENGINE = ReplacingMergeTree ORDER BY version`); err != nil {
		return err
	}
	rows, err := query[struct{ Version int }](ctx, s, "SELECT version AS Version FROM schema_migrations FINAL")
	if err != nil {
		return err
	}
	applied := map[int]bool{}
	for _, r := range rows {
		applied[r.Version] = true
	}
	for _, f := range files {
		if applied[f.version] {
			continue
		}
		if err := s.apply(ctx, fsys, f); err != nil {
			return fmt.Errorf("chstore: migration %s: %w", f.name, err)
		}
	}
	return nil
}

type migration struct {
	version int
	name    string
}

// migrationFiles lists the migrations in version order.
func migrationFiles(fsys fs.FS) ([]migration, error) {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	seen := map[int]string{}
	for _, p := range names {
		name := strings.TrimPrefix(p, "migrations/")
		m := migrationName.FindStringSubmatch(name)
		if m == nil {
			return nil, fmt.Errorf("chstore: migration %s: name is not NNNN_name.sql", name)
		}
		v, _ := strconv.Atoi(m[1])
		if other, dup := seen[v]; dup {
			return nil, fmt.Errorf("chstore: migrations %s and %s have the same version", other, name)
		}
		seen[v] = name
		out = append(out, migration{version: v, name: name})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

// apply runs one migration's statements, then records its version.
func (s *Store) apply(ctx context.Context, fsys fs.FS, m migration) error {
	text, err := fs.ReadFile(fsys, "migrations/"+m.name)
	if err != nil {
		return err
	}
	for i, stmt := range statements(string(text)) {
		done, err := s.columnAdded(ctx, stmt)
		if err == nil && !done {
			err = s.exec(ctx, stmt)
		}
		if err != nil {
			return fmt.Errorf("statement %d: %w", i+1, err)
		}
	}
	return s.exec(ctx, fmt.Sprintf("INSERT INTO schema_migrations (version, name, applied) VALUES (%d, %s, now())",
		m.version, quote(m.name)))
}

// columnAdded reports whether stmt adds a column its table already has:
// applied before the migration's version was recorded, the statement
// would fail ("already exists") on every later run.
func (s *Store) columnAdded(ctx context.Context, stmt string) (bool, error) {
	m := addColumn.FindStringSubmatch(stmt)
	if m == nil {
		return false, nil
	}
	rows, err := query[struct {
		N int `json:"n"`
	}](ctx, s, fmt.Sprintf("SELECT toInt32(count()) AS n FROM system.columns WHERE database = %s AND table = %s AND name = %s",
		quote(s.database), quote(m[1]), quote(m[2])))
	if err != nil {
		return false, err
	}
	return len(rows) == 1 && rows[0].N > 0, nil
}

// statements splits a migration at lines ending with ';', dropping
// comment lines (ClickHouse takes one statement per request).
func statements(text string) []string {
	var out []string
	var cur []string
	for _, line := range strings.Split(text, "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		if strings.HasSuffix(t, ";") {
			cur = append(cur, strings.TrimSuffix(strings.TrimRight(line, " \t\r"), ";"))
			out = append(out, strings.Join(cur, "\n"))
			cur = nil
			continue
		}
		cur = append(cur, line)
	}
	if len(cur) > 0 {
		out = append(out, strings.Join(cur, "\n"))
	}
	return out
}
