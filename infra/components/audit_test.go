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
	"github.com/lockplane/lockplane/services/audit/chserver"
	"github.com/lockplane/lockplane/services/resourcetest"
)

// The audit store's configuration runs Debian's clickhouse-server: HTTP
// on the host's address (here 127.0.0.2, a loopback address standing in
// for it) answers queries from a client the users file lets in with the
// writer's password, refuses one without it, and the native TCP port is
// not served.
func TestClickHouseConfigServesHTTPOnTheHostAddress(t *testing.T) {
	if testing.Short() {
		t.Skip("starts clickhouse-server")
	}
	if _, err := os.Stat(components.ClickHouseBin); err != nil {
		t.Skipf("%s is not installed (make clickhouse)", components.ClickHouseBin)
	}
	dir := t.TempDir()
	ports, err := resourcetest.FreePortsOn("127.0.0.2", 1)
	if err != nil {
		t.Skipf("no 127.0.0.2: %v", err)
	}
	port := ports[0]
	h := topology.Host{Name: "audit-1", Address: "127.0.0.2", Root: "/"}
	f := components.ClickHouseFiles{Config: filepath.Join(dir, "config.xml"), Users: filepath.Join(dir, "users.xml"),
		Data: filepath.Join(dir, "data"), Logs: filepath.Join(dir, "log")}
	os.WriteFile(f.Config, []byte(components.ClickHouseConfig(h, port, f)), 0o644)
	const writer, reader = "writer-password-0123", "reader-password-0123"
	os.WriteFile(f.Users, []byte(components.ClickHouseUsers([]string{"127.0.0.2"},
		chserver.Passwords{WriterSHA256: chserver.PasswordSHA256(writer), ReaderSHA256: chserver.PasswordSHA256(reader)})), 0o600)
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
	post := func(user, password string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, url+"/", strings.NewReader("SELECT 1"))
		if user != "" {
			req.SetBasicAuth(user, password)
		}
		return client.Do(req)
	}
	for {
		resp, err := post(chserver.WriterUser, writer)
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
	for _, c := range [][2]string{{"", ""}, {"default", ""}, {chserver.WriterUser, reader}} {
		resp, err := post(c[0], c[1])
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("user %q with password %q: answered %q; want a refusal", c[0], c[1], b)
		}
	}
	if c, err := net.DialTimeout("tcp", "127.0.0.2:9000", time.Second); err == nil {
		c.Close()
		t.Fatal("the native TCP port 9000 is served")
	}
}

// The users file lets in loopback and the given clients only, as the
// writer and the read-only reader with their passwords' hashes; there is
// no default user and no password in it.
func TestClickHouseUsersListsTheClients(t *testing.T) {
	u := components.ClickHouseUsers([]string{"10.0.0.21", "10.1.0.0/16"},
		chserver.Passwords{WriterSHA256: chserver.PasswordSHA256("w-secret"), ReaderSHA256: chserver.PasswordSHA256("r-secret")})
	for _, want := range []string{"<ip>127.0.0.1</ip>", "<ip>::1</ip>", "<ip>10.0.0.21</ip>", "<ip>10.1.0.0/16</ip>",
		"<lockplane>", "<lockplane_reader>", "<readonly>2</readonly>",
		"<password_sha256_hex>" + chserver.PasswordSHA256("w-secret") + "</password_sha256_hex>",
		"<password_sha256_hex>" + chserver.PasswordSHA256("r-secret") + "</password_sha256_hex>"} {
		if !strings.Contains(u, want) {
			t.Fatalf("%s missing from\n%s", want, u)
		}
	}
	for _, bad := range []string{"::/0", "<default>\n            <password", "<password>", "w-secret", "r-secret"} {
		if strings.Contains(u, bad) {
			t.Fatalf("%q in the users file:\n%s", bad, u)
		}
	}
}

// A configured password is refused when short or not one line; the error
// names the key, never the password.
func TestAConfiguredAuditPasswordIsChecked(t *testing.T) {
	for _, p := range []string{"short", "a password with spaces", "line-one-of-it\nline-two"} {
		err := components.CheckPassword("lockplane:auditWriterPassword", p)
		if err == nil || !strings.HasPrefix(err.Error(), "lockplane:auditWriterPassword: ") || strings.Contains(err.Error(), p) {
			t.Errorf("%q: %v; want a refusal naming the key only", p, err)
		}
	}
	if err := components.CheckPassword("k", "0123456789abcdef:/+="); err != nil {
		t.Errorf("a good password: %v", err)
	}
}
