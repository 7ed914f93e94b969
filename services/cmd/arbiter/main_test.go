package main

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The production arbiter does not fail open on authorisation by omission.
func TestAnArbiterWithoutAPolicySetRefusesToStart(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		f    flags
		want []string
	}{
		{flags{endpoints: "http://127.0.0.1:1"}, []string{"--policies", "--allow-any-workload"}},
		{flags{endpoints: "http://127.0.0.1:1", policies: "policies", allowAnyWorkload: true}, []string{"choose one"}},
	} {
		err := run(context.Background(), tc.f, log)
		if err == nil {
			t.Fatalf("%+v: started", tc.f)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("%+v: %v, want it to name %q", tc.f, err, w)
			}
		}
	}
}

// Audit never takes the lock service down: with an audit store that does
// not answer, the arbiter starts, serves locks, and says the store did not
// answer to an operator's audit query.
func TestAnUnreachableAuditStoreDoesNotStopLockServing(t *testing.T) {
	dir := t.TempDir()
	env := devenvtest.Start(t, devenv.Options{Dir: dir})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	pki := filepath.Join(dir, "pki")
	f := flags{
		listen: addr, metricsListen: "127.0.0.1:0", endpoints: strings.Join(env.Cluster.Endpoints(), ","),
		svidCert: filepath.Join(pki, "arbiter", "svid.pem"), svidKey: filepath.Join(pki, "arbiter", "key.pem"),
		bundle: filepath.Join(pki, "bundle.pem"), domain: devenv.TrustDomain, cluster: "embedded", operatorPrefix: "/operator/",
		opTimeout: 2 * time.Second, allowAnyWorkload: true, policyReload: time.Minute,
		auditStore: "http://127.0.0.1:1", auditDatabase: "lockplane",
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- run(sctx, f, slog.New(slog.DiscardHandler)) }()
	// After the clients close (cleanups run last first): a graceful stop
	// waits for their streams.
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("arbiter stopped with %v", err)
		}
	})
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		select {
		case err := <-served:
			t.Fatalf("the arbiter did not start: %v", err)
		case <-ctx.Done():
			t.Fatalf("the arbiter did not listen on %s: %v", addr, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	p := *env.Profile
	p.Endpoint = addr
	dial := func(name string) *lockclient.Client {
		c, err := lockclient.DialProfile(&p, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	s := devenvtest.Session(t, dial("demo"), "")
	h, err := s.Lock(ctx, "team-a/orders/42", func(*lockclient.Hold) {})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = adminv1.NewAdminServiceClient(dial("alice").Conn()).Audit(ctx, &adminv1.AuditRequest{Key: "team-a/orders/42"})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("audit query with the store down: %v, want UNAVAILABLE", err)
	}
}

// A malformed --audit-store is a configuration error, refused at start.
func TestAMalformedAuditStoreIsRefused(t *testing.T) {
	f := flags{endpoints: "http://127.0.0.1:1", allowAnyWorkload: true, auditStore: "clickhouse:8123", auditDatabase: "lockplane"}
	if err := run(context.Background(), f, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "--audit-store") {
		t.Fatalf("run: %v, want a refusal naming --audit-store", err)
	}
}
