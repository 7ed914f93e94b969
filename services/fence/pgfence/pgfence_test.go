package pgfence_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/fence"
	"github.com/lockplane/lockplane/services/fence/pgfence"
	"github.com/lockplane/lockplane/services/resourcetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	resourcetest.StopPostgres()
	os.Exit(code)
}

func tok(rev int64) token.Token { t, _ := token.Mint(1, rev); return t }

var orders = pgfence.Table{Name: "orders"}

func setup(t *testing.T) (*pgxpool.Pool, context.Context) {
	pool, _ := resourcetest.StartPostgres(t).Database(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if _, err := pool.Exec(ctx, "CREATE TABLE orders (id bigint PRIMARY KEY, status text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if err := orders.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := orders.Migrate(ctx, pool); err != nil { // idempotent
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO orders (id, status) VALUES (42, 'new')"); err != nil {
		t.Fatal(err)
	}
	return pool, ctx
}

func row(t *testing.T, pool *pgxpool.Pool, id int) (string, int64) {
	var s string
	var f int64
	if err := pool.QueryRow(context.Background(), "SELECT status, fence FROM orders WHERE id = $1", id).Scan(&s, &f); err != nil {
		t.Fatal(err)
	}
	return s, f
}

func TestUpdateOrdersWritesByToken(t *testing.T) {
	pool, ctx := setup(t)
	set := func(v string) pgfence.Col { return pgfence.Col{Name: "status", Value: v} }

	if err := orders.Update(ctx, pool, tok(10), 42, set("paid")); err != nil {
		t.Fatalf("first token: %v", err)
	}
	if err := orders.Update(ctx, pool, tok(20), 42, set("shipped")); err != nil {
		t.Fatalf("newer token: %v", err)
	}
	// Stale: a token older than the mark changes nothing.
	if err := orders.Update(ctx, pool, tok(15), 42, set("stale")); !errors.Is(err, fence.ErrStaleFence) {
		t.Fatalf("older token: %v, want ErrStaleFence", err)
	}
	// Equal: a grant writes a record once (see package fence).
	if err := orders.Update(ctx, pool, tok(20), 42, set("again")); !errors.Is(err, fence.ErrStaleFence) {
		t.Fatalf("equal token: %v, want ErrStaleFence", err)
	}
	if s, f := row(t, pool, 42); s != "shipped" || f != int64(tok(20)) {
		t.Fatalf("row = (%q, %d), want (shipped, token 20)", s, f)
	}
	if err := orders.Update(ctx, pool, tok(30), 7, set("x")); !errors.Is(err, fence.ErrNoRecord) {
		t.Fatalf("missing row: %v, want ErrNoRecord", err)
	}
}

func TestInsertPath(t *testing.T) {
	pool, ctx := setup(t)
	if err := orders.Insert(ctx, pool, tok(10), 43, pgfence.Col{Name: "status", Value: "new"}); err != nil {
		t.Fatal(err)
	}
	if err := orders.Insert(ctx, pool, tok(5), 43, pgfence.Col{Name: "status", Value: "stale"}); !errors.Is(err, fence.ErrStaleFence) {
		t.Fatalf("insert over a newer row: %v, want ErrStaleFence", err)
	}
	if err := orders.Insert(ctx, pool, tok(11), 43, pgfence.Col{Name: "status", Value: "redo"}); err != nil {
		t.Fatalf("insert over an older row: %v", err)
	}
	if s, f := row(t, pool, 43); s != "redo" || f != int64(tok(11)) {
		t.Fatalf("row = (%q, %d)", s, f)
	}
}

// Many writers at once with distinct tokens: exactly the writes whose token
// exceeded the mark at their moment land, and the last mark is the highest
// token that landed.
func TestConcurrentWritersKeepTheMarkMonotonic(t *testing.T) {
	pool, ctx := setup(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var landed []token.Token
	for i := 1; i <= 40; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			tk := tok(int64(1000 + (i*7919)%40))
			err := orders.Update(ctx, pool, tk, 42, pgfence.Col{Name: "status", Value: tk.String()})
			if err != nil && !errors.Is(err, fence.ErrStaleFence) {
				t.Error(err)
			}
			if err == nil {
				mu.Lock()
				landed = append(landed, tk)
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	_, f := row(t, pool, 42)
	var max token.Token
	for _, l := range landed {
		max = token.Token(maxU(uint64(max), uint64(l)))
	}
	if f != int64(max) || len(landed) == 0 {
		t.Fatalf("mark %d, highest landed %d (%d landed)", f, max, len(landed))
	}
}

func maxU(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}
