package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// run is lockplane-node probe with args, as a Service's readiness check
// runs it: its output, or its error.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := probeCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	cmd.SilenceUsage = true
	err := cmd.Execute()
	return strings.TrimSpace(out.String()), err
}

func TestProbeHTTPPrintsTheAddressThatAnswered(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ping" {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("Ok.\n"))
	}))
	defer srv.Close()
	out, err := run(t, "http", srv.URL+"/ping")
	if err != nil || out != srv.Listener.Addr().String() {
		t.Fatalf("probe http of a serving server: %q, %v; want %s", out, err, srv.Listener.Addr())
	}
	out, err = run(t, "http", srv.URL+"/minio/health/live")
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "want 200") {
		t.Fatalf("probe http of a 503: %q, %v; want it refused naming both statuses", out, err)
	}
	if _, err := run(t, "http", srv.URL+"/minio/health/live", "--want", "503"); err != nil {
		t.Fatalf("--want 503: %v", err)
	}
}

// etcd's /health over TLS with a client certificate: the member's own
// files, as they lie on its host.
func TestProbeHTTPWithTheMembersClientCertificate(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"health":"true"}`))
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	// The test server's certificate serves as the client's too: what
	// matters is that the files are read and sent.
	dir := t.TempDir()
	ca, key := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "key.pem")
	der, err := x509.MarshalPKCS8PrivateKey(srv.TLS.Certificates[0].PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644)
	os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
	if _, err := run(t, "http", srv.URL+"/health", "--cert", ca, "--key", key); err == nil {
		t.Fatal("a server of an unknown CA was trusted without --ca")
	}
	if _, err := run(t, "http", srv.URL+"/health", "--ca", ca); err == nil {
		t.Fatal("passed without the client certificate the server requires")
	}
	out, err := run(t, "http", srv.URL+"/health", "--ca", ca, "--cert", ca, "--key", key)
	if err != nil || out != srv.Listener.Addr().String() {
		t.Fatalf("probe http with --ca, --cert, --key: %q, %v", out, err)
	}
	if _, err := run(t, "http", srv.URL+"/health", "--ca", ca, "--cert", ca); err == nil || !strings.Contains(err.Error(), "--cert and --key") {
		t.Fatalf("--cert without --key: %v", err)
	}
}

func TestProbeTCP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	out, err := run(t, "tcp", addr)
	if err != nil || out != addr {
		t.Fatalf("probe tcp of a listener: %q, %v", out, err)
	}
	l.Close()
	if _, err := run(t, "tcp", addr, "--timeout", "2s"); err == nil {
		t.Fatal("probe tcp of a closed port passed")
	}
}
