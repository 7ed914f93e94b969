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
// statement `ALTER TABLE t ADD COLUMN c TYPE ...` is skipped when t already
// has column c of that TYPE (as system.columns spells it, spaces aside),
// fails when c has another type, and is refused when it has a second
// action: write columns one statement each, each with its type.
//
//go:embed migrations/*.sql
var migrations embed.FS

var (
	migrationName = regexp.MustCompile(`^(\d+)_[a-z0-9_]+\.sql$`)
	identifier    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	addColumn     = regexp.MustCompile(`(?is)^\s*ALTER\s+TABLE\s+([A-Za-z_][A-Za-z0-9_]*)\s+ADD\s+COLUMN\s+([A-Za-z_][A-Za-z0-9_]*)(\s.*)?$`)
	// columnClause ends a column's type: what may follow it in ADD COLUMN.
	columnClause = regexp.MustCompile(`(?i)^(DEFAULT|MATERIALIZED|ALIAS|EPHEMERAL|CODEC|COMMENT|TTL|AFTER|FIRST|SETTINGS)$`)
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
		if err := s.applyStatement(ctx, stmt); err != nil {
			return fmt.Errorf("statement %d: %w", i+1, err)
		}
	}
	return s.exec(ctx, fmt.Sprintf("INSERT INTO schema_migrations (version, name, applied) VALUES (%d, %s, now())",
		m.version, quote(m.name)))
}

// applyStatement runs stmt, or skips an ADD COLUMN whose column is there
// with its type: applied before the migration's version was recorded, it
// would fail ("already exists") on every later run.
func (s *Store) applyStatement(ctx context.Context, stmt string) error {
	add, isAdd, err := parseAddColumn(stmt)
	if err != nil {
		return err
	}
	if isAdd {
		if there, err := s.hasColumn(ctx, add); err != nil || there {
			return err
		}
	}
	err = s.exec(ctx, stmt)
	if err != nil && isAdd {
		// Another migrator (an arbiter starting beside this one) may have
		// added it since the check: that is success, if the type is ours.
		if there, cerr := s.hasColumn(ctx, add); cerr != nil || there {
			return cerr
		}
	}
	return err
}

// columnAdd is an `ALTER TABLE table ADD COLUMN column typ ...` statement.
type columnAdd struct {
	table, column string
	// typ is the declared type without the spaces outside quotes, as
	// sameType compares it.
	typ string
}

// parseAddColumn reads stmt as an ADD COLUMN (ok false when it is none).
// It refuses one with a second action (a comma outside parentheses and
// quotes): the runner skips a whole statement, which would drop the
// second; and one that declares no type, which it could not compare.
func parseAddColumn(stmt string) (add columnAdd, ok bool, err error) {
	m := addColumn.FindStringSubmatch(stmt)
	if m == nil {
		return columnAdd{}, false, nil
	}
	add = columnAdd{table: m[1], column: m[2]}
	var words []string // the top-level words after the column's name
	depth, word := 0, ""
	flush := func() {
		if word != "" {
			words = append(words, word)
			word = ""
		}
	}
	rest := m[3]
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		switch {
		case c == '\'' || c == '"' || c == '`':
			end := closingQuote(rest, i)
			word += rest[i:end]
			i = end - 1
		case c == '-' && strings.HasPrefix(rest[i:], "--"):
			for i < len(rest) && rest[i] != '\n' {
				i++
			}
			flush()
		case c == '(':
			depth++
			word += "("
		case c == ')':
			depth--
			word += ")"
		case c == ',' && depth == 0:
			return add, true, fmt.Errorf("ALTER TABLE %s ADD COLUMN %s: a statement adding a column must have one action (it has a top-level ','): put each in its own statement", add.table, add.column)
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if depth == 0 {
				flush()
			}
		default:
			word += string(c)
		}
	}
	flush()
	for _, w := range words {
		if columnClause.MatchString(w) {
			break
		}
		add.typ += w
	}
	if add.typ == "" {
		return add, true, fmt.Errorf("ALTER TABLE %s ADD COLUMN %s: a statement adding a column must declare its type, which the runner compares with an existing column's", add.table, add.column)
	}
	return add, true, nil
}

// closingQuote returns the index just past the quote that closes the one
// at s[i] (a doubled or backslashed quote does not close), or len(s).
func closingQuote(s string, i int) int {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\':
			j++
		case s[j] == q && j+1 < len(s) && s[j+1] == q:
			j++
		case s[j] == q:
			return j + 1
		}
	}
	return len(s)
}

// hasColumn reports whether add's table has its column, failing if it
// has it with another type: the schema is then not what the migration
// says, and skipping it would hide that.
func (s *Store) hasColumn(ctx context.Context, add columnAdd) (bool, error) {
	rows, err := query[struct {
		Type string `json:"type"`
	}](ctx, s, fmt.Sprintf("SELECT type FROM system.columns WHERE database = %s AND table = %s AND name = %s",
		quote(s.database), quote(add.table), quote(add.column)))
	if err != nil || len(rows) == 0 {
		return false, err
	}
	if got, _, _ := parseAddColumn(fmt.Sprintf("ALTER TABLE t ADD COLUMN c %s", rows[0].Type)); got.typ != add.typ {
		return false, fmt.Errorf("ALTER TABLE %s ADD COLUMN %s: the column exists with type %s, not the declared %s: the schema is not what the migrations say",
			add.table, add.column, rows[0].Type, add.typ)
	}
	return true, nil
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
