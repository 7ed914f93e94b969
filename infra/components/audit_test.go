package components_test

import (
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/infra/components"
	"github.com/lockplane/lockplane/infra/topology"
)

// The audit store's configuration runs Debian's clickhouse-server: HTTP
// on the host's address (here 127.0.0.2, a loopback address standing in
// for it) answers queries from a client the users file lets in, and the
// native TCP port is not served.
func TestClickHouseConfigServesHTTPOnTheHostAddress(t *testing.T) {
	if testing.Short() {
		t.Skip("starts clickhouse-server")
	}
	if _, err := os.Stat(components.ClickHouseBin); err != nil {
		t.Skipf("%s is not installed (make clickhouse)", components.ClickHouseBin)
	}
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no 127.0.0.2: %v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	h := topology.Host{Name: "audit-1", Address: "127.0.0.2", Root: "/"}
	f := components.ClickHouseFiles{Config: filepath.Join(dir, "config.xml"), Users: filepath.Join(dir, "users.xml"),
		Data: filepath.Join(dir, "data"), Logs: filepath.Join(dir, "log")}
	os.WriteFile(f.Config, []byte(components.ClickHouseConfig(h, port, f)), 0o644)
	os.WriteFile(f.Users, []byte(components.ClickHouseUsers([]string{"127.0.0.2"})), 0o644)
	out, _ := os.Create(filepath.Join(dir, "stdout.log"))
	defer out.Close()
	cmd := exec.Command(components.ClickHouseBin, "--config-file="+f.Config)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	defer func() { cmd.Process.Kill(); <-done }()

	url := "http://127.0.0.2:" + strconv.Itoa(port)
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := client.Post(url+"/", "text/plain", strings.NewReader("SELECT 1"))
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(b)) != "1" {
				t.Fatalf("SELECT 1: %s %q", resp.Status, b)
			}
			break
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(f.Logs, "server.err.log"))
			t.Fatalf("clickhouse-server exited: %v\n%s", cmd.ProcessState, log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer on %s: %v", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if c, err := net.DialTimeout("tcp", "127.0.0.2:9000", time.Second); err == nil {
		c.Close()
		t.Fatal("the native TCP port 9000 is served")
	}
}

// The users file lets in loopback and the given clients only.
func TestClickHouseUsersListsTheClients(t *testing.T) {
	u := components.ClickHouseUsers([]string{"10.0.0.21", "10.1.0.0/16"})
	for _, want := range []string{"<ip>127.0.0.1</ip>", "<ip>::1</ip>", "<ip>10.0.0.21</ip>", "<ip>10.1.0.0/16</ip>", "<password></password>"} {
		if !strings.Contains(u, want) {
			t.Fatalf("%s missing from\n%s", want, u)
		}
	}
	if strings.Contains(u, "::/0") {
		t.Fatal("the store lets in every address")
	}
}
