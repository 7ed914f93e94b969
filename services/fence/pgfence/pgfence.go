// Package pgfence is the reference fence for PostgreSQL: the guarded write
// and the fence in one statement (ADR-16),
//
//	UPDATE t SET ..., fence = $token WHERE id = $id AND fence < $token
//
// so no other statement can come between the check and the write. A holder
// that reads the record to compute its write claims the token in the
// statement that reads (Claim), and writes only while its claim stands
// (UpdateClaimed). Copy it; the pause test kit (lockctl pausetest) proves a
// copy still fences.
package pgfence

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/fence"
)

// DB is what pgfence needs of a connection, pool or transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Table is a table whose rows each carry their own fence mark. The mark is
// per record: a mark per table would refuse current holders of other keys.
type Table struct {
	// Name is the table, e.g. "orders" or "billing.invoices".
	Name string
	// Key is the primary key column; "id" when empty.
	Key string
	// Fence is the mark column; "fence" when empty.
	Fence string
}

// Col is one column assignment of a guarded write.
type Col struct {
	Name  string
	Value any
}

func (t Table) key() string   { return ident(or(t.Key, "id")) }
func (t Table) fence() string { return ident(or(t.Fence, "fence")) }
func (t Table) name() string  { return pgx.Identifier(strings.Split(t.Name, ".")).Sanitize() }

func or(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func ident(s string) string { return pgx.Identifier{s}.Sanitize() }

// Migrate adds the fence column to an existing table: bigint, never null,
// 0 for rows no token has written (every token is greater than 0).
func (t Table) Migrate(ctx context.Context, db DB) error {
	_, err := db.Exec(ctx, fmt.Sprintf("ALTER TABLE %s ADD COLUMN IF NOT EXISTS %s bigint NOT NULL DEFAULT 0", t.name(), t.fence()))
	if err != nil {
		return fmt.Errorf("pgfence: migrate %s: %w", t.Name, err)
	}
	return nil
}

// Update writes cols to the record with key id under tok, in one statement
// that applies only if tok is greater than the record's mark and moves the
// mark to tok. It returns fence.ErrStaleFence if the mark was not lower and
// fence.ErrNoRecord if there is no such record; nothing is written then.
func (t Table) Update(ctx context.Context, db DB, tok token.Token, id any, cols ...Col) error {
	// The mark moves to tok in the same SET.
	return t.guarded(ctx, db, tok, id, "<", append([]Col{{Name: or(t.Fence, "fence"), Value: int64(tok)}}, cols...))
}

// guarded writes cols to the record with key id where the record's mark
// compares to tok by cmp ("<": older; "=": claimed by tok), in one
// statement whose existence probe sees the same snapshot, so a refusal is
// classified without a second round trip.
func (t Table) guarded(ctx context.Context, db DB, tok token.Token, id any, cmp string, cols []Col) error {
	if len(cols) == 0 || (cmp == "<" && len(cols) == 1) {
		return fmt.Errorf("pgfence: update %s: no columns to set", t.Name)
	}
	args := []any{int64(tok), id}
	var set []string
	for _, c := range cols {
		args = append(args, c.Value)
		set = append(set, fmt.Sprintf("%s = $%d", ident(c.Name), len(args)))
	}
	sql := fmt.Sprintf(`WITH u AS (UPDATE %[1]s SET %[2]s WHERE %[4]s = $2 AND %[3]s %[5]s $1 RETURNING 1)
SELECT (SELECT count(*) FROM u), EXISTS (SELECT 1 FROM %[1]s WHERE %[4]s = $2)`, t.name(), strings.Join(set, ", "), t.fence(), t.key(), cmp)
	var updated int64
	var exists bool
	if err := db.QueryRow(ctx, sql, args...).Scan(&updated, &exists); err != nil {
		return fmt.Errorf("pgfence: update %s: %w", t.Name, err)
	}
	switch {
	case updated == 1:
		return nil
	case !exists:
		return fence.ErrNoRecord
	default:
		return fence.ErrStaleFence
	}
}

// Claim moves the record's mark to tok, if tok is greater, and reads cols
// of the record into dest in the same statement. A holder that reads a
// record to compute its write (read-modify-write) reads it through Claim
// and writes with UpdateClaimed: once the next holder has claimed, the
// previous holder's write is refused, so the next holder never computes
// from a read that a late write then overtakes (the force-release window,
// docs/force-release.md). It returns fence.ErrStaleFence if the mark was
// not lower and fence.ErrNoRecord if there is no such record; nothing is
// claimed or read then.
func (t Table) Claim(ctx context.Context, db DB, tok token.Token, id any, cols []string, dest ...any) error {
	if len(cols) == 0 || len(cols) != len(dest) {
		return fmt.Errorf("pgfence: claim %s: %d columns for %d destinations", t.Name, len(cols), len(dest))
	}
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = ident(c)
	}
	// UPDATE ... RETURNING: the row lock that moves the mark is held while
	// the columns are read, so no write comes between the claim and the read.
	sql := fmt.Sprintf("UPDATE %[1]s SET %[2]s = $1 WHERE %[3]s = $2 AND %[2]s < $1 RETURNING %[4]s",
		t.name(), t.fence(), t.key(), strings.Join(names, ", "))
	err := db.QueryRow(ctx, sql, int64(tok), id).Scan(dest...)
	if !errors.Is(err, pgx.ErrNoRows) {
		if err != nil {
			return fmt.Errorf("pgfence: claim %s: %w", t.Name, err)
		}
		return nil
	}
	// Refused: say why. Nothing was written, so a second read is safe.
	var exists bool
	if err := db.QueryRow(ctx, fmt.Sprintf("SELECT EXISTS (SELECT 1 FROM %s WHERE %s = $1)", t.name(), t.key()), id).Scan(&exists); err != nil {
		return fmt.Errorf("pgfence: claim %s: %w", t.Name, err)
	}
	if !exists {
		return fence.ErrNoRecord
	}
	return fence.ErrStaleFence
}

// UpdateClaimed writes cols to the record with key id under tok, in one
// statement that applies only while the record's mark is tok: claimed by
// this grant's Claim, and by no newer token since. It returns
// fence.ErrStaleFence otherwise (the mark moved on, or tok never claimed)
// and fence.ErrNoRecord if there is no such record; nothing is written then.
// Every reader of a record written this way must read through Claim: a
// plain read would let a write under an older claim land after it.
func (t Table) UpdateClaimed(ctx context.Context, db DB, tok token.Token, id any, cols ...Col) error {
	return t.guarded(ctx, db, tok, id, "=", cols)
}

// Insert creates the record with key id under tok. If it already exists, it
// is overwritten only if tok is greater than its mark (the same rule as
// Update, in the same statement); otherwise fence.ErrStaleFence.
func (t Table) Insert(ctx context.Context, db DB, tok token.Token, id any, cols ...Col) error {
	names := []string{t.key(), t.fence()}
	args := []any{id, int64(tok)}
	ph := []string{"$1", "$2"}
	var set []string
	for _, c := range cols {
		args = append(args, c.Value)
		names = append(names, ident(c.Name))
		ph = append(ph, fmt.Sprintf("$%d", len(args)))
		set = append(set, fmt.Sprintf("%s = EXCLUDED.%s", ident(c.Name), ident(c.Name)))
	}
	set = append(set, fmt.Sprintf("%s = EXCLUDED.%s", t.fence(), t.fence()))
	sql := fmt.Sprintf("INSERT INTO %s AS t (%s) VALUES (%s) ON CONFLICT (%s) DO UPDATE SET %s WHERE t.%s < EXCLUDED.%s",
		t.name(), strings.Join(names, ", "), strings.Join(ph, ", "), t.key(), strings.Join(set, ", "), t.fence(), t.fence())
	tag, err := db.Exec(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("pgfence: insert into %s: %w", t.Name, err)
	}
	if tag.RowsAffected() == 0 {
		return fence.ErrStaleFence
	}
	return nil
}
