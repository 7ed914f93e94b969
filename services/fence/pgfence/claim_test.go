package pgfence_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/fence"
	"github.com/lockplane/lockplane/services/fence/pgfence"
)

// rmw is how a holder reads a record it then writes (read-modify-write):
// read under its token, then write under it.
type rmw struct {
	name  string
	read  func(ctx context.Context, pool *pgxpool.Pool, tk token.Token) (string, error)
	write func(ctx context.Context, pool *pgxpool.Pool, tk token.Token, v string) error
}

// claimed is the fix: the read claims the token (moves the mark, if the
// token is newer) in the statement that reads, and the write applies only
// while the mark is still that token.
var claimed = rmw{
	name: "Claim then UpdateClaimed",
	read: func(ctx context.Context, pool *pgxpool.Pool, tk token.Token) (string, error) {
		var v string
		err := orders.Claim(ctx, pool, tk, 42, []string{"status"}, &v)
		return v, err
	},
	write: func(ctx context.Context, pool *pgxpool.Pool, tk token.Token, v string) error {
		return orders.UpdateClaimed(ctx, pool, tk, 42, pgfence.Col{Name: "status", Value: v})
	},
}

// readThenWrite is what a holder could do before Claim: read the record
// unfenced, then write it with the fenced Update. The fence checks the
// write only.
var readThenWrite = rmw{
	name: "read, then Update",
	read: func(ctx context.Context, pool *pgxpool.Pool, _ token.Token) (string, error) {
		var v string
		err := pool.QueryRow(ctx, "SELECT status FROM orders WHERE id = 42").Scan(&v)
		return v, err
	},
	write: func(ctx context.Context, pool *pgxpool.Pool, tk token.Token, v string) error {
		return orders.Update(ctx, pool, tk, 42, pgfence.Col{Name: "status", Value: v})
	},
}

// forceReleasedMidway runs the force-release schedule on a counter kept in
// the record: A (token 10) reads; A's hold is force-released and B
// (token 20) is granted and reads; A, resuming, writes its increment; B
// writes its own. It returns every increment the resource accepted and the
// record's final count: an accepted write that the final count lacks is a
// lost update.
func forceReleasedMidway(t *testing.T, how rmw) (accepted []int, final int) {
	pool, ctx := setup(t)
	if _, err := pool.Exec(ctx, "UPDATE orders SET status = '0' WHERE id = 42"); err != nil {
		t.Fatal(err)
	}
	type holder struct {
		tk   token.Token
		inc  int
		read string
	}
	a, b := &holder{tk: tok(10), inc: 1}, &holder{tk: tok(20), inc: 10}
	for _, h := range []*holder{a, b} { // A reads, is paused; B is granted and reads
		v, err := how.read(ctx, pool, h.tk)
		if err != nil {
			t.Fatalf("%s: read under token %d: %v", how.name, h.tk.Revision(), err)
		}
		h.read = v
	}
	for _, h := range []*holder{a, b} { // A resumes and writes; then B
		n, err := strconv.Atoi(h.read)
		if err != nil {
			t.Fatal(err)
		}
		err = how.write(ctx, pool, h.tk, strconv.Itoa(n+h.inc))
		switch {
		case err == nil:
			accepted = append(accepted, h.inc)
		case !errors.Is(err, fence.ErrStaleFence):
			t.Fatalf("%s: write under token %d: %v", how.name, h.tk.Revision(), err)
		}
	}
	s, _ := row(t, pool, 42)
	final, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return accepted, final
}

func sum(xs []int) (n int) {
	for _, x := range xs {
		n += x
	}
	return n
}

// A holder force-released between its read and its write cannot lose the
// next holder an update: the next holder's claim moves the mark before it
// reads, so the old holder's late write is refused, and every accepted
// increment is in the record. The next holder's own write is accepted.
func TestClaimBeforeReadLosesNoUpdateUnderForceRelease(t *testing.T) {
	accepted, final := forceReleasedMidway(t, claimed)
	if final != sum(accepted) {
		t.Fatalf("%s: accepted increments %v, but the record counts %d: an accepted write was lost", claimed.name, accepted, final)
	}
	if len(accepted) != 1 || accepted[0] != 10 {
		t.Fatalf("%s: accepted %v, want only the new holder's +10", claimed.name, accepted)
	}
}

// The negative control: with an unfenced read the same schedule loses the
// old holder's accepted write, which is the window Claim closes. If this
// ever passes, the schedule no longer reaches the window.
func TestReadThenWriteLosesAnUpdateUnderForceRelease(t *testing.T) {
	accepted, final := forceReleasedMidway(t, readThenWrite)
	if final == sum(accepted) {
		t.Fatalf("%s: accepted %v and the record counts %d: the schedule no longer shows the lost update", readThenWrite.name, accepted, final)
	}
}

// Claim refuses a token not newer than the mark and reports a missing
// record; UpdateClaimed applies only while the mark is the claimed token.
func TestClaimRefusals(t *testing.T) {
	pool, ctx := setup(t)
	var v string
	if err := orders.Claim(ctx, pool, tok(20), 42, []string{"status"}, &v); err != nil || v != "new" {
		t.Fatalf("claim: %q, %v", v, err)
	}
	if err := orders.Claim(ctx, pool, tok(20), 42, []string{"status"}, &v); !errors.Is(err, fence.ErrStaleFence) {
		t.Fatalf("equal claim: %v, want ErrStaleFence", err)
	}
	if err := orders.Claim(ctx, pool, tok(15), 42, []string{"status"}, &v); !errors.Is(err, fence.ErrStaleFence) {
		t.Fatalf("older claim: %v, want ErrStaleFence", err)
	}
	if err := orders.Claim(ctx, pool, tok(30), 7, []string{"status"}, &v); !errors.Is(err, fence.ErrNoRecord) {
		t.Fatalf("missing row: %v, want ErrNoRecord", err)
	}
	if err := orders.UpdateClaimed(ctx, pool, tok(25), 42, pgfence.Col{Name: "status", Value: "unclaimed"}); !errors.Is(err, fence.ErrStaleFence) {
		t.Fatalf("write under a token never claimed: %v, want ErrStaleFence", err)
	}
	if err := orders.UpdateClaimed(ctx, pool, tok(20), 42, pgfence.Col{Name: "status", Value: "paid"}); err != nil {
		t.Fatalf("write under the claim: %v", err)
	}
	if s, f := row(t, pool, 42); s != "paid" || f != int64(tok(20)) {
		t.Fatalf("row = (%q, %d), want (paid, token 20)", s, f)
	}
	if err := orders.UpdateClaimed(ctx, pool, tok(30), 7, pgfence.Col{Name: "status", Value: "x"}); !errors.Is(err, fence.ErrNoRecord) {
		t.Fatalf("missing row: %v, want ErrNoRecord", err)
	}
}
