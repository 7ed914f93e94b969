package arbiter

import (
	"context"

	"github.com/lockplane/lockplane/services/client/identity"
	"google.golang.org/grpc"
)

// Service is the lock API as a process serves it: an *Arbiter, or a
// *Router over shards.
type Service interface {
	Run(context.Context)
	Ready(context.Context) error
	Register(*grpc.Server)
	UnaryInterceptor() grpc.UnaryServerInterceptor
	StreamInterceptor() grpc.StreamServerInterceptor
	Drain()
}

var (
	_ Service = (*Arbiter)(nil)
	_ Service = (*Router)(nil)
)

// NewGRPCServer is s's gRPC server: mTLS with src's SVID for any peer of
// its trust domain, and s's interceptors, which give every call its one
// deadline for all its etcd requests and its caller. It is the one way a
// process (bin/arbiter, the embedded default) serves the lock API.
func NewGRPCServer(s Service, src identity.Source) (*grpc.Server, error) {
	creds, err := identity.ServerCredentials(src)
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer(grpc.Creds(creds), grpc.ChainUnaryInterceptor(s.UnaryInterceptor()), grpc.ChainStreamInterceptor(s.StreamInterceptor()))
	s.Register(srv)
	return srv, nil
}
