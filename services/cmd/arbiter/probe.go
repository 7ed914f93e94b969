package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/identity"
	"github.com/lockplane/lockplane/services/internal/arbiter/health"
	"github.com/lockplane/lockplane/services/internal/svidflags"
	"github.com/spiffe/go-spiffe/v2/spiffegrpc/grpccredentials"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
)

// probeFlags are `arbiter probe`'s: the readiness check of an arbiter on
// its host. It is the arbiter binary itself so that SPIRE issues it the
// arbiter's SVID (the entry's selectors are the binary's path and uid).
type probeFlags struct {
	addr     string
	svid     svidflags.Flags
	sealedOK bool
	timeout  time.Duration
}

// probeMain runs `arbiter probe ARGS`: it prints the address that
// answered SERVING (with --sealed-ok, also NOT_SERVING, as "ADDR sealed")
// and returns 0, or says why not and returns 1 (2 for bad flags).
func probeMain(args []string, stdout, stderr io.Writer) int {
	var f probeFlags
	fs := flag.NewFlagSet("arbiter probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.addr, "addr", "", "the arbiter's gRPC address, IP:PORT (required)")
	f.svid.Register(fs) // --trust-domain: the region's; the arbiter must be of it
	fs.BoolVar(&f.sealedOK, "sealed-ok", false, "pass on NOT_SERVING too, printing \"sealed\": a DR stack's arbiter serves sealed until operators advance the epoch")
	fs.DurationVar(&f.timeout, "timeout", 8*time.Second, "bound on the whole check, the SVID included")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	out, err := probe(ctx, f)
	if err != nil {
		fmt.Fprintln(stderr, "arbiter probe:", err)
		return 1
	}
	fmt.Fprintln(stdout, out)
	return 0
}

// probe makes one gRPC health check of the lock service at f.addr over
// mTLS with the SVID f names, and returns the line to print. The probe
// runs as the arbiter binary on the arbiter's host, so its SVID is the
// arbiter's own: the server must show exactly that ID, so another
// workload of the trust domain listening at the address never passes.
func probe(ctx context.Context, f probeFlags) (string, error) {
	if f.addr == "" {
		return "", errors.New("--addr: required")
	}
	src, err := f.svid.Open(ctx)
	if err != nil {
		return "", err
	}
	defer src.Close()
	self, err := identity.ID(src)
	if err != nil {
		return "", err
	}
	if f.svid.Domain != "" {
		td, err := spiffeid.TrustDomainFromString(f.svid.Domain)
		if err != nil {
			return "", fmt.Errorf("--trust-domain %q: %w", f.svid.Domain, err)
		}
		if !self.MemberOf(td) {
			return "", fmt.Errorf("--trust-domain %s: this process's SVID is %s, of another trust domain", td, self)
		}
	}
	creds := grpccredentials.MTLSClientCredentials(src, src, tlsconfig.AuthorizeID(self))
	conn, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return "", fmt.Errorf("--addr %s: %w", f.addr, err)
	}
	defer conn.Close()
	var p peer.Peer
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: lockv1.LockService_ServiceDesc.ServiceName},
		grpc.Peer(&p)) // fails fast: the Service's loop retries, and says why it failed

	if err != nil {
		return "", fmt.Errorf("health check of %s: %w", f.addr, err)
	}
	answered := f.addr
	if p.Addr != nil {
		answered = p.Addr.String()
	}
	switch st := resp.GetStatus(); {
	case st == healthpb.HealthCheckResponse_SERVING:
		return answered, nil
	case st == healthpb.HealthCheckResponse_NOT_SERVING && f.sealedOK:
		// Sealed only if it has read its epoch: NOT_SERVING is also an
		// arbiter that cannot read etcd at all.
		known, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: health.EpochKnown})
		if err != nil || known.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			return "", fmt.Errorf("%s answers NOT_SERVING and has not read its epoch (%v, %v): not sealed, unable to read its cluster", answered, known.GetStatus(), err)
		}
		return answered + " sealed", nil
	default:
		return "", fmt.Errorf("%s answers %s (sealed, or its epoch not read yet)", answered, st)
	}
}
