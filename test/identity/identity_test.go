package identity_test

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/client/identity"
	"github.com/lockplane/lockplane/services/devca"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func source(t *testing.T, ca *devca.CA, path string) identity.Source {
	t.Helper()
	dir := t.TempDir()
	bundle, err := ca.WriteBundle(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := ca.WriteSVID(filepath.Join(dir, "svid"), path, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	f.Bundle = bundle
	src, err := identity.FromFiles(f)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// serve runs a gRPC server with the caller-recording health service.
func serve(t *testing.T, src identity.Source, seen chan<- string) string {
	creds, err := identity.ServerCredentials(src)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.Creds(creds), grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		id, err := identity.Caller(ctx)
		if err == nil {
			seen <- id.String()
		}
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(s, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func call(t *testing.T, addr string, src identity.Source, server string) error {
	creds, err := identity.ClientCredentials(src, server)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

func TestMutualTLSWithSVIDs(t *testing.T) {
	ca, _ := devca.New("lockplane.test", time.Hour)
	foreign, _ := devca.New("elsewhere.test", time.Hour)
	seen := make(chan string, 8)
	addr := serve(t, source(t, ca, "/arbiter"), seen)

	// A workload of the trust domain is authenticated by its SPIFFE ID.
	if err := call(t, addr, source(t, ca, "/ns/team-a/sa/demo"), "spiffe://lockplane.test/arbiter"); err != nil {
		t.Fatalf("workload of the trust domain refused: %v", err)
	}
	if got := <-seen; got != "spiffe://lockplane.test/ns/team-a/sa/demo" {
		t.Fatalf("server saw caller %q", got)
	}
	// A workload of another trust domain is refused by the server.
	if err := call(t, addr, source(t, foreign, "/ns/team-a/sa/demo"), "spiffe://lockplane.test/arbiter"); err == nil {
		t.Fatal("a foreign trust domain's SVID was accepted")
	}
	// A client refuses a server that is not the arbiter it asked for.
	if err := call(t, addr, source(t, ca, "/ns/team-a/sa/demo"), "spiffe://lockplane.test/impostor"); err == nil {
		t.Fatal("client accepted a server with another SPIFFE ID")
	}
}

func TestFromFilesRefusesMismatchedTrustDomain(t *testing.T) {
	ca, _ := devca.New("lockplane.test", time.Hour)
	dir := t.TempDir()
	bundle, _ := ca.WriteBundle(dir)
	f, _ := ca.WriteSVID(filepath.Join(dir, "svid"), "/x", time.Hour)
	f.Bundle, f.TrustDomain = bundle, "other.test"
	if _, err := identity.FromFiles(f); err == nil {
		t.Fatal("an SVID of lockplane.test loaded as other.test")
	}
}
