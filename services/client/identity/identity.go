// Package identity supplies SPIFFE X.509 identities to the arbiter and its
// clients, and reads the authenticated caller from a gRPC request.
//
// Both ends speak mTLS with SVIDs: the arbiter accepts any workload of its
// trust domain (what it may lock is decided later, per key); a client accepts
// only the arbiter's own SPIFFE ID. In production the SVIDs come from the
// SPIRE agent's Workload API and rotate by themselves; in development they
// are files written by package devca.
package identity

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffegrpc/grpccredentials"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"github.com/spiffe/go-spiffe/v2/workloadapi"
	"google.golang.org/grpc/credentials"
)

// Source is an SVID and the trust bundles to verify peers with.
type Source interface {
	x509svid.Source
	x509bundle.Source
	io.Closer
}

// Files names an SVID and a bundle on disk.
type Files struct {
	Cert, Key, Bundle string
	TrustDomain       string
}

type fileSource struct {
	*x509svid.SVID
	*x509bundle.Bundle
}

func (fileSource) Close() error { return nil }

// FromFiles loads an SVID and its trust domain's bundle from PEM files.
func FromFiles(f Files) (Source, error) {
	td, err := spiffeid.TrustDomainFromString(f.TrustDomain)
	if err != nil {
		return nil, fmt.Errorf("identity: trust domain %q: %w", f.TrustDomain, err)
	}
	svid, err := x509svid.Load(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("identity: svid: %w", err)
	}
	if svid.ID.TrustDomain() != td {
		return nil, fmt.Errorf("identity: svid %s is not in trust domain %s", svid.ID, td)
	}
	b, err := x509bundle.Load(td, f.Bundle)
	if err != nil {
		return nil, fmt.Errorf("identity: bundle: %w", err)
	}
	return fileSource{svid, b}, nil
}

// FromWorkloadAPI connects to a SPIRE agent's Workload API socket
// ("unix:///run/spire/agent.sock") and follows its rotations; ctx bounds
// the wait for the first SVID.
func FromWorkloadAPI(ctx context.Context, socket string) (Source, error) {
	return FromWorkloadAPIAs(ctx, socket, "")
}

// FromWorkloadAPIAs is FromWorkloadAPI serving the SVID of id among those
// the agent issues the process (a process matching several entries gets
// several), and refusing when the agent issues none of id. An empty id
// takes the agent's first.
func FromWorkloadAPIAs(ctx context.Context, socket, id string) (Source, error) {
	opts := []workloadapi.X509SourceOption{workloadapi.WithClientOptions(workloadapi.WithAddr(socket))}
	if id != "" {
		want, err := spiffeid.FromString(id)
		if err != nil {
			return nil, fmt.Errorf("identity: SPIFFE ID %q: %w", id, err)
		}
		opts = append(opts, workloadapi.WithDefaultX509SVIDPicker(func(svids []*x509svid.SVID) *x509svid.SVID {
			for _, s := range svids {
				if s.ID == want {
					return s
				}
			}
			return nil
		}))
	}
	src, err := workloadapi.NewX509Source(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("identity: workload API %s: %w", socket, err)
	}
	// The agent may issue the other SVIDs first (an entry just made
	// reaches it at its next sync): wait for id's within ctx.
	for {
		if _, err := src.GetX509SVID(); err == nil {
			return src, nil
		}
		if err := src.WaitUntilUpdated(ctx); err != nil {
			src.Close()
			return nil, fmt.Errorf("identity: workload API %s issues this process no SVID of %s: %w", socket, id, err)
		}
	}
}

// ID is the source's own SPIFFE ID.
func ID(src Source) (spiffeid.ID, error) {
	svid, err := src.GetX509SVID()
	if err != nil {
		return spiffeid.ID{}, err
	}
	return svid.ID, nil
}

// ServerCredentials serve mTLS and accept any peer of the source's trust
// domain.
func ServerCredentials(src Source) (credentials.TransportCredentials, error) {
	id, err := ID(src)
	if err != nil {
		return nil, err
	}
	return grpccredentials.MTLSServerCredentials(src, src, tlsconfig.AuthorizeMemberOf(id.TrustDomain())), nil
}

// ClientCredentials dial with mTLS and accept only the server named.
func ClientCredentials(src Source, server string) (credentials.TransportCredentials, error) {
	sid, err := spiffeid.FromString(server)
	if err != nil {
		return nil, fmt.Errorf("identity: server id %q: %w", server, err)
	}
	return grpccredentials.MTLSClientCredentials(src, src, tlsconfig.AuthorizeID(sid)), nil
}

// ErrNoPeer means the request carried no verified SVID.
var ErrNoPeer = errors.New("identity: request has no verified SPIFFE ID")

// Caller is the SPIFFE ID of the verified peer of a gRPC request.
func Caller(ctx context.Context) (spiffeid.ID, error) {
	id, ok := grpccredentials.PeerIDFromContext(ctx)
	if !ok {
		return spiffeid.ID{}, ErrNoPeer
	}
	return id, nil
}
