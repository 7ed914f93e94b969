// Package spiretest starts a real SPIRE server and agent for tests.
//
// It runs them as a region does (bin/spire-server and bin/spire-agent,
// `make spire`).
// It is apart from package resourcetest, whose servers the policy and
// audit packages' own tests use: this one imports them.
package spiretest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/pki"
	"github.com/lockplane/lockplane/services/resourcetest"
	"github.com/lockplane/lockplane/services/spire"
	entryv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/entry/v1"
)

// SPIRE is a spire-server and one agent (bin/spire-server and
// bin/spire-agent, built by `make spire`) on loopback, configured as
// `lockplane up` configures a region's: the agent attests with an x509pop
// node certificate and serves the Workload API on AgentSocket.
type SPIRE struct {
	TrustDomain string
	// AgentID is the agent's SPIFFE ID, the parent of its host's entries.
	AgentID string
	// AgentSocket is the Workload API, as unix:///path.
	AgentSocket string
	// ServerSocket is the server's admin API.
	ServerSocket string
	// Bundle is the trust domain's root (PEM), the upstream authority of
	// SPIRE's CA as in a region: SVIDs from the agent verify against it.
	Bundle string
	dir    string
}

// spireHost is the test agent's host name, its node certificate's CN.
const spireHost = "test-host"

// StartSPIRE starts a server and an agent for trustDomain, stopped when
// the test ends.
func StartSPIRE(t testing.TB, trustDomain string) *SPIRE {
	t.Helper()
	resourcetest.NotShort(t, "a SPIRE server and agent")
	root, err := resourcetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	server, agent := filepath.Join(root, "bin", "spire-server"), filepath.Join(root, "bin", "spire-agent")
	for _, b := range []string{server, agent} {
		if _, err := os.Stat(b); err != nil {
			resourcetest.Unavailable(t, "SPIRE", "build it with `make spire` (.ci/run does)", err)
		}
	}
	// Unix socket paths are short: not under t.TempDir.
	dir, err := os.MkdirTemp("", "spire-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &SPIRE{TrustDomain: trustDomain, AgentID: spire.AgentID(trustDomain, spireHost), ServerSocket: filepath.Join(dir, "server.sock"), dir: dir}
	s.AgentSocket = "unix://" + filepath.Join(dir, "agent.sock")
	nodeCA, nodeCert, nodeKey, err := writeNodeCert(dir, spireHost)
	if err != nil {
		t.Fatal(err)
	}
	upCert, upKey, err := s.writeUpstream()
	if err != nil {
		t.Fatal(err)
	}
	port, err := resourcetest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	conf, err := spire.ServerConfig{TrustDomain: trustDomain, BindAddress: "127.0.0.1", BindPort: port, SocketPath: s.ServerSocket,
		DataDir: filepath.Join(dir, "server"), NodeCA: nodeCA, CATTL: 24 * time.Hour, SVIDTTL: time.Hour,
		UpstreamCert: upCert, UpstreamKey: upKey, UpstreamBundle: s.Bundle}.Render()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run(t, ctx, server, dir, "server", conf)
	waitHealthy(t, ctx, server, "-socketPath", s.ServerSocket)
	conf, err = spire.AgentConfig{TrustDomain: trustDomain, ServerAddress: "127.0.0.1", ServerPort: port, SocketPath: filepath.Join(dir, "agent.sock"),
		DataDir: filepath.Join(dir, "agent"), TrustBundle: s.Bundle, NodeCert: nodeCert, NodeKey: nodeKey}.Render()
	if err != nil {
		t.Fatal(err)
	}
	run(t, ctx, agent, dir, "agent", conf)
	waitHealthy(t, ctx, agent, "-socketPath", filepath.Join(dir, "agent.sock"))
	return s
}

// Register makes the agent's entries exactly entries.
func (s *SPIRE) Register(t testing.TB, entries []spire.Entry) spire.Report {
	t.Helper()
	conn, err := spire.Dial(s.ServerSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rep, err := spire.Sync(context.Background(), entryv1.NewEntryClient(conn), []string{s.AgentID}, entries)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// run starts a SPIRE process with its configuration, logging beside it.
func run(t testing.TB, ctx context.Context, bin, dir, name string, conf []byte) {
	t.Helper()
	confPath := filepath.Join(dir, name+".conf")
	if err := os.WriteFile(confPath, conf, 0o600); err != nil {
		t.Fatal(err)
	}
	resourcetest.StartLogged(t, exec.Command(bin, "run", "-config", confPath), filepath.Join(dir, name+".log"))
}

// waitHealthy runs the binary's own readiness probe until it passes.
func waitHealthy(t testing.TB, ctx context.Context, bin string, args ...string) {
	t.Helper()
	for {
		out, err := exec.CommandContext(ctx, bin, append([]string{"healthcheck"}, args...)...).CombinedOutput()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s healthcheck: %v\n%s", filepath.Base(bin), err, out)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// writeUpstream writes the trust domain's root (s.Bundle) and the
// intermediate SPIRE's CA is signed by, as the program mints them.
func (s *SPIRE) writeUpstream() (cert, key string, err error) {
	td, err := url.Parse("spiffe://" + s.TrustDomain)
	if err != nil {
		return "", "", err
	}
	root, err := pki.NewCA(s.TrustDomain+" CA", 48*time.Hour, td)
	if err != nil {
		return "", "", err
	}
	certPEM, keyPEM, err := root.IssueCA(s.TrustDomain+" SPIRE upstream", 48*time.Hour, td)
	if err != nil {
		return "", "", err
	}
	s.Bundle, cert, key = filepath.Join(s.dir, "bundle.pem"), filepath.Join(s.dir, "upstream.crt"), filepath.Join(s.dir, "upstream.key")
	for path, b := range map[string][]byte{s.Bundle: root.CertPEM, cert: certPEM, key: keyPEM} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return "", "", err
		}
	}
	return cert, key, nil
}

// writeNodeCert writes a node CA and a host's x509pop certificate, as the
// program mints them for each host.
func writeNodeCert(dir, host string) (ca, cert, key string, err error) {
	nodeCA, err := pki.NewCA("test node CA", 24*time.Hour)
	if err != nil {
		return "", "", "", err
	}
	certPEM, keyPEM, err := nodeCA.Issue(pki.Request{CommonName: host, Client: true, TTL: 24 * time.Hour})
	if err != nil {
		return "", "", "", err
	}
	ca, cert, key = filepath.Join(dir, "node-ca.pem"), filepath.Join(dir, "node.crt"), filepath.Join(dir, "node.key")
	for path, b := range map[string][]byte{ca: nodeCA.CertPEM, cert: certPEM, key: keyPEM} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return "", "", "", fmt.Errorf("write %s: %w", path, err)
		}
	}
	return ca, cert, key, nil
}
