package resourcetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// PGBin is where Debian's postgresql-15 package puts the server binaries.
const PGBin = "/usr/lib/postgresql/15/bin"

// Postgres is a running PostgreSQL server shared by a test binary.
type Postgres struct {
	dir  string
	port int
}

var (
	pgOnce sync.Once
	pg     *Postgres
	pgErr  error
)

// StartPostgres returns the test binary's PostgreSQL server, starting it on
// first use. Call StopPostgres from TestMain to remove it.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	NotShort(t, "a PostgreSQL server")
	pgOnce.Do(func() { pg, pgErr = startPostgres() })
	if pgErr != nil {
		Unavailable(t, "PostgreSQL 15", "install it with `apt-get install postgresql-15` (.ci/run does)", pgErr)
	}
	return pg
}

// StopPostgres stops the shared server if one was started.
func StopPostgres() {
	if pg != nil {
		pg.Stop()
	}
}

// NewPostgres starts a server outside a test (the release gate's runner);
// Stop removes it.
func NewPostgres() (*Postgres, error) { return startPostgres() }

// Stop stops the server and removes its data.
func (p *Postgres) Stop() {
	exec.Command("runuser", "-u", "postgres", "--", filepath.Join(PGBin, "pg_ctl"), "-D", p.dir, "-m", "immediate", "stop").Run()
	os.RemoveAll(filepath.Dir(p.dir))
}

func startPostgres() (*Postgres, error) {
	if _, err := os.Stat(filepath.Join(PGBin, "postgres")); err != nil {
		return nil, err
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	// initdb refuses to run as root; the data directory is the postgres
	// user's, under /tmp so that user can reach it.
	dir, err := os.MkdirTemp("", "lockplane-pg-")
	if err != nil {
		return nil, err
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	as := func(args ...string) error {
		out, err := exec.Command("runuser", append([]string{"-u", "postgres", "--"}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %v\n%s", args[0], err, out)
		}
		return nil
	}
	if err := as(filepath.Join(PGBin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"); err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c fsync=off", port, dir)
	if err := as(filepath.Join(PGBin, "pg_ctl"), "-D", data, "-l", filepath.Join(dir, "log"), "-w", "-o", opts, "start"); err != nil {
		return nil, err
	}
	return &Postgres{dir: data, port: port}, nil
}

// URL is a connection string for database db.
func (p *Postgres) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", p.port, db)
}

// Addr is the server's host:port.
func (p *Postgres) Addr() string { return fmt.Sprintf("127.0.0.1:%d", p.port) }

// Database creates a fresh database for the test and returns a pool on it.
func (p *Postgres) Database(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgxpool.New(ctx, p.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	name := fmt.Sprintf("t%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, p.URL(name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, p.URL(name)
}
