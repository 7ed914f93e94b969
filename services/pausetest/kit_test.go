package pausetest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/fence"
	"github.com/lockplane/lockplane/services/pausetest"
	"github.com/lockplane/lockplane/services/pausetest/pauseresult"
	"github.com/lockplane/lockplane/services/resourcetest"
)

// TestMain doubles as the holder process: the kit starts this binary again
// with pausetest.HolderEnv set.
func TestMain(m *testing.M) {
	if isHolder, err := pausetest.HolderFromEnv(); isHolder {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	resourcetest.StopPostgres()
	resourcetest.StopMinIO()
	os.Exit(code)
}

// The classic wrong fences of ADR-17, kept here so the kit can be shown to
// catch each. Never copy these.
func init() {
	wrongPG := func(name string, write func(c *pgx.Conn, ctx context.Context, tok token.Token, record, value string) error, prepare func(context.Context, string) error) {
		pausetest.Register(pausetest.Kind{Name: name, Prepare: prepare, Identity: func(string) string { return name },
			Open: func(ctx context.Context, target string, dial pausetest.DialFunc) (pausetest.Resource, error) {
				c, err := pausetest.ConnectPostgres(ctx, target, dial)
				if err != nil {
					return nil, err
				}
				return wrongResource{pausetest.PGConn{Conn: c}, write}, nil
			}})
	}
	// The check in one statement, the write in another.
	wrongPG("pg-check-then-write", func(c *pgx.Conn, ctx context.Context, tok token.Token, record, value string) error {
		var mark int64
		err := c.QueryRow(ctx, "SELECT fence FROM "+pausetest.PGTable+" WHERE id = $1", record).Scan(&mark)
		if err == nil && mark >= int64(tok) {
			return fence.ErrStaleFence
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		_, err = c.Exec(ctx, "INSERT INTO "+pausetest.PGTable+" (id, value, fence) VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET value = EXCLUDED.value, fence = EXCLUDED.fence", record, value, int64(tok))
		return err
	}, pausetest.PreparePostgres)
	// <= where < is required.
	wrongPG("pg-less-or-equal", func(c *pgx.Conn, ctx context.Context, tok token.Token, record, value string) error {
		tag, err := c.Exec(ctx, "INSERT INTO "+pausetest.PGTable+" AS t (id, value, fence) VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET value = EXCLUDED.value, fence = EXCLUDED.fence WHERE t.fence <= EXCLUDED.fence", record, value, int64(tok))
		if err == nil && tag.RowsAffected() == 0 {
			return fence.ErrStaleFence
		}
		return err
	}, pausetest.PreparePostgres)
	// One mark for the whole table instead of one per record.
	wrongPG("pg-mark-per-table", func(c *pgx.Conn, ctx context.Context, tok token.Token, record, value string) error {
		tag, err := c.Exec(ctx, `WITH m AS (INSERT INTO lockplane_pausetest_marks (name, fence) VALUES ('t', $3) ON CONFLICT (name) DO UPDATE SET fence = EXCLUDED.fence WHERE lockplane_pausetest_marks.fence < EXCLUDED.fence RETURNING 1)
INSERT INTO `+pausetest.PGTable+` (id, value) SELECT $1, $2 FROM m ON CONFLICT (id) DO UPDATE SET value = EXCLUDED.value`, record, value, int64(tok))
		if err == nil && tag.RowsAffected() == 0 {
			return fence.ErrStaleFence
		}
		return err
	}, func(ctx context.Context, target string) error {
		if err := pausetest.PreparePostgres(ctx, target); err != nil {
			return err
		}
		c, err := pgx.Connect(ctx, target)
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		_, err = c.Exec(ctx, "CREATE TABLE IF NOT EXISTS lockplane_pausetest_marks (name text PRIMARY KEY, fence bigint NOT NULL)")
		return err
	})
}

type wrongResource struct {
	pausetest.PGConn
	write func(c *pgx.Conn, ctx context.Context, tok token.Token, record, value string) error
}

func (w wrongResource) Write(ctx context.Context, tok token.Token, record, value string) error {
	return w.write(w.Conn, ctx, tok, record, value)
}

func runKit(t *testing.T, env *devenv.Env, kind, target string) *pauseresult.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := pausetest.Run(ctx, pausetest.Config{
		Kind: kind, Target: target, Class: devenvtest.Fast.Name, SchemaVersion: "test-1",
		Profile: env.ProfilePath, Holder: "demo", Rival: "other",
		Command:  []string{os.Args[0], "-test.run=^$"},
		Progress: func(c, s string) { t.Logf("%-14s %s", c, s) },
	})
	if err != nil {
		t.Fatalf("kit could not run: %v", err)
	}
	return res
}

func failedCases(r *pauseresult.Result) []string {
	var out []string
	for _, c := range r.Status.Cases {
		if c.Outcome != pauseresult.Passed {
			out = append(out, c.Name)
		}
	}
	return out
}

func TestReferenceFencesPass(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	pg := resourcetest.StartPostgres(t)
	_, pgURL := pg.Database(t)
	m := resourcetest.StartMinIO(t)
	s3URL := fmt.Sprintf("http://%s:%s@%s/%s", resourcetest.MinIOUser, resourcetest.MinIOPassword, m.Endpoint, m.Bucket(t))
	for kind, target := range map[string]string{"postgres": pgURL, "s3": s3URL} {
		t.Run(kind, func(t *testing.T) {
			r := runKit(t, env, kind, target)
			if !r.Passed() {
				t.Fatalf("the reference %s fence failed cases %v", kind, failedCases(r))
			}
			if r.Kind != "PauseTestResult" || r.Spec.Class != devenvtest.Fast.Name || r.Spec.Resource.SchemaVersion != "test-1" ||
				r.Spec.KitVersion != pauseresult.KitVersion || r.Status.Expires.Sub(r.Status.CompletedAt) != pauseresult.Validity {
				t.Fatalf("result document: %+v", r)
			}
			if strings.Contains(r.Spec.Resource.Identity, resourcetest.MinIOPassword) {
				t.Fatal("the result names the resource with its credentials")
			}
			var paused int
			for _, c := range r.Status.Cases {
				if strings.HasPrefix(c.Name, "paused-at-") {
					paused++
				}
			}
			if paused == 0 || len(r.Status.Cases) != paused+2 {
				t.Fatalf("cases %v", r.Status.Cases)
			}
		})
	}
}

// Each wrong fence must fail, and in the case built to catch it.
func TestWrongFencesFail(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	pg := resourcetest.StartPostgres(t)
	for kind, mustFail := range map[string]string{
		"pg-check-then-write": "paused-at-",
		"pg-less-or-equal":    "equal-token",
		"pg-mark-per-table":   "per-record",
	} {
		t.Run(kind, func(t *testing.T) {
			_, url := pg.Database(t)
			r := runKit(t, env, kind, url)
			failed := failedCases(r)
			if r.Passed() {
				t.Fatalf("the kit passed %s", kind)
			}
			caught := false
			for _, f := range failed {
				caught = caught || strings.HasPrefix(f, mustFail)
			}
			if !caught {
				t.Fatalf("%s failed %v, want a failure in %s*", kind, failed, mustFail)
			}
		})
	}
}
