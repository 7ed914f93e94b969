package resourcetest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/audit/chserver"
)

// ClickHouseBin is where Debian's clickhouse-server package (18.16) puts
// the server.
const ClickHouseBin = chserver.Bin

// ClickHouse is a running ClickHouse server shared by a test binary,
// reached through its HTTP interface as its writer or reader user
// (Writer, Reader: random passwords, so the tests authenticate for real).
type ClickHouse struct {
	*chserver.Server
}

var (
	chOnce sync.Once
	ch     *ClickHouse
	chErr  error
)

// StartClickHouse returns the test binary's ClickHouse server, starting it
// on first use. Call StopClickHouse from TestMain to remove it.
func StartClickHouse(t testing.TB) *ClickHouse {
	t.Helper()
	NotShort(t, "a ClickHouse server")
	chOnce.Do(func() { ch, chErr = startClickHouse() })
	if chErr != nil {
		Unavailable(t, "ClickHouse", "install it with `make clickhouse` (.ci/run does)", chErr)
	}
	return ch
}

// StopClickHouse stops the shared server if one was started.
func StopClickHouse() {
	if ch != nil {
		ch.Stop()
		os.RemoveAll(ch.Dir())
	}
}

func startClickHouse() (*ClickHouse, error) {
	if !chserver.Installed() {
		return nil, fmt.Errorf("%s is not installed", ClickHouseBin)
	}
	dir, err := os.MkdirTemp("", "lockplane-clickhouse-")
	if err != nil {
		return nil, err
	}
	s, err := chserver.Start(context.Background(), dir)
	if err != nil {
		return nil, err
	}
	return &ClickHouse{s}, nil
}

// Database creates a fresh database for the test, dropped when it ends,
// and returns its name.
func (c *ClickHouse) Database(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d", time.Now().UnixNano())
	if err := c.exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.exec("DROP DATABASE IF EXISTS " + name) })
	return name
}

// exec runs one statement that returns nothing, as the writer.
func (c *ClickHouse) exec(query string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL()+"/", strings.NewReader(query))
	if err != nil {
		return err
	}
	req.SetBasicAuth(c.Writer())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("clickhouse: %s: %s", query, body)
	}
	return nil
}
