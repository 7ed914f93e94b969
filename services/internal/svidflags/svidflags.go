// Package svidflags is how a service command is given its SPIFFE
// identity: the SPIRE Workload API, or SVID files. The arbiter and
// lockplane-fanin take the same flags.
package svidflags

import (
	"context"
	"errors"
	"flag"

	"github.com/lockplane/lockplane/services/client/identity"
)

// Flags are --spiffe-socket, or --svid-cert, --svid-key, --bundle and
// --trust-domain.
type Flags struct {
	Socket, Cert, Key, Bundle, Domain string
}

// Register adds the flags to fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Socket, "spiffe-socket", "", "SPIRE Workload API socket, e.g. unix:///run/spire/agent.sock")
	fs.StringVar(&f.Cert, "svid-cert", "", "SVID certificate (PEM), instead of --spiffe-socket")
	fs.StringVar(&f.Key, "svid-key", "", "SVID key (PEM)")
	fs.StringVar(&f.Bundle, "bundle", "", "trust bundle (PEM)")
	fs.StringVar(&f.Domain, "trust-domain", "", "trust domain of the SVID files")
}

// Open is the identity the flags name; the Workload API's follows its
// rotations until ctx ends or it is closed.
func (f Flags) Open(ctx context.Context) (identity.Source, error) {
	switch {
	case f.Socket != "":
		return identity.FromWorkloadAPI(ctx, f.Socket)
	case f.Cert != "":
		return identity.FromFiles(identity.Files{Cert: f.Cert, Key: f.Key, Bundle: f.Bundle, TrustDomain: f.Domain})
	}
	return nil, errors.New("an identity is required: --spiffe-socket, or --svid-cert, --svid-key, --bundle and --trust-domain")
}
