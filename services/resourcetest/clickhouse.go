package resourcetest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// ClickHouseBin is where Debian's clickhouse-server package (18.16) puts
// the server.
const ClickHouseBin = "/usr/sbin/clickhouse-server"

// ClickHouse is a running ClickHouse server shared by a test binary,
// reached through its HTTP interface.
type ClickHouse struct {
	url  string
	cmd  *exec.Cmd
	dir  string
	done chan struct{} // closed when the process exits
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
	chOnce.Do(func() { ch, chErr = startClickHouse() })
	if chErr != nil {
		unavailable(t, "ClickHouse", "install it with `make clickhouse` (.ci/run does)", chErr)
	}
	return ch
}

// StopClickHouse stops the shared server if one was started.
func StopClickHouse() {
	if ch != nil {
		ch.cmd.Process.Kill()
		<-ch.done
		os.RemoveAll(ch.dir)
	}
}

// URL is the base URL of the server's HTTP interface.
func (c *ClickHouse) URL() string { return c.url }

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

// exec runs one statement that returns nothing.
func (c *ClickHouse) exec(query string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/", strings.NewReader(query))
	if err != nil {
		return err
	}
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

func startClickHouse() (*ClickHouse, error) {
	if _, err := os.Stat(ClickHouseBin); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "lockplane-clickhouse-")
	if err != nil {
		return nil, err
	}
	var ports [3]int // HTTP, native TCP, interserver
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	config := filepath.Join(dir, "config.xml")
	if err := os.WriteFile(config, []byte(clickHouseConfig(dir, ports)), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "users.xml"), []byte(clickHouseUsers), 0o644); err != nil {
		return nil, err
	}
	c := &ClickHouse{url: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), dir: dir, done: make(chan struct{})}
	c.cmd = exec.Command(ClickHouseBin, "--config-file="+config)
	out, _ := os.Create(filepath.Join(dir, "stdout.log"))
	c.cmd.Stdout, c.cmd.Stderr = out, out
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { c.cmd.Wait(); close(c.done) }()
	if err := c.awaitPing(60 * time.Second); err != nil {
		c.cmd.Process.Kill()
		<-c.done
		return nil, fmt.Errorf("%v; see %s", err, filepath.Join(dir, "log"))
	}
	return c, nil
}

// awaitPing polls GET /ping until it answers, the server exits, or the
// deadline passes.
func (c *ClickHouse) awaitPing(within time.Duration) error {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-c.done:
			return fmt.Errorf("clickhouse-server exited: %v", c.cmd.ProcessState)
		case <-deadline.C:
			return fmt.Errorf("clickhouse-server did not answer /ping within %v", within)
		case <-tick.C:
			resp, err := client.Get(c.url + "/ping")
			if err != nil {
				continue
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
}

// clickHouseConfig is the server configuration: the few settings of
// /etc/clickhouse-server/config.xml a single local server needs, every
// port on loopback and every path under dir.
func clickHouseConfig(dir string, ports [3]int) string {
	return fmt.Sprintf(`<?xml version="1.0"?>
<yandex>
    <logger>
        <level>warning</level>
        <log>%[1]s/log/server.log</log>
        <errorlog>%[1]s/log/server.err.log</errorlog>
        <size>10M</size>
        <count>1</count>
    </logger>
    <listen_host>127.0.0.1</listen_host>
    <http_port>%[2]d</http_port>
    <tcp_port>%[3]d</tcp_port>
    <interserver_http_port>%[4]d</interserver_http_port>
    <interserver_http_host>127.0.0.1</interserver_http_host>
    <max_concurrent_queries>100</max_concurrent_queries>
    <mark_cache_size>268435456</mark_cache_size>
    <path>%[1]s/data/</path>
    <tmp_path>%[1]s/tmp/</tmp_path>
    <user_files_path>%[1]s/user_files/</user_files_path>
    <format_schema_path>%[1]s/format_schemas/</format_schema_path>
    <users_config>users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <timezone>UTC</timezone>
    <mlock_executable>false</mlock_executable>
</yandex>
`, dir, ports[0], ports[1], ports[2])
}

// clickHouseUsers has the one user, default, without a password, from
// loopback only.
const clickHouseUsers = `<?xml version="1.0"?>
<yandex>
    <profiles><default></default></profiles>
    <users>
        <default>
            <password></password>
            <networks><ip>127.0.0.1</ip></networks>
            <profile>default</profile>
            <quota>default</quota>
        </default>
    </users>
    <quotas><default></default></quotas>
</yandex>
`
