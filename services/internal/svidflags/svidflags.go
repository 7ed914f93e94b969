// Package svidflags is how a service command is given its SPIFFE
// identity: the SPIRE Workload API, or SVID files. The arbiter and
// lockplane-fanin take the same flags.
package svidflags

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/lockplane/lockplane/services/client/identity"
)

// Flags are --spiffe-socket (with --spiffe-id), or --svid-cert,
// --svid-key, --bundle and --trust-domain.
type Flags struct {
	Socket, ID, Cert, Key, Bundle, Domain string
}

// FirstSVIDWait bounds the wait for the Workload API's first SVID: a
// service without one exits saying so, for its supervisor to restart.
const FirstSVIDWait = 2 * time.Minute

// Register adds the flags to fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Socket, "spiffe-socket", "", "SPIRE Workload API socket, e.g. unix:///run/spire/agent.sock")
	fs.StringVar(&f.ID, "spiffe-id", "", "with --spiffe-socket, the SPIFFE ID to serve as, of those the agent issues (default: the agent's first)")
	fs.StringVar(&f.Cert, "svid-cert", "", "SVID certificate (PEM), instead of --spiffe-socket")
	fs.StringVar(&f.Key, "svid-key", "", "SVID key (PEM)")
	fs.StringVar(&f.Bundle, "bundle", "", "trust bundle (PEM)")
	fs.StringVar(&f.Domain, "trust-domain", "", "trust domain of the SVID files")
}

// Open is the identity the flags name; the Workload API's follows its
// rotations until it is closed, and ctx or FirstSVIDWait bounds the wait
// for its first SVID.
func (f Flags) Open(ctx context.Context) (identity.Source, error) {
	if f.ID != "" && f.Socket == "" {
		return nil, errors.New("--spiffe-id: needs --spiffe-socket; SVID files name their own ID")
	}
	switch {
	case f.Socket != "":
		wait := FirstSVIDWait
		if d, ok := ctx.Deadline(); ok && time.Until(d) < wait {
			wait = time.Until(d).Round(time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		src, err := identity.FromWorkloadAPIAs(ctx, f.Socket, f.ID)
		if err != nil {
			return nil, fmt.Errorf("--spiffe-socket: no SVID within %s (is this process registered with the agent?): %w", wait, err)
		}
		return src, nil
	case f.Cert != "":
		return identity.FromFiles(identity.Files{Cert: f.Cert, Key: f.Key, Bundle: f.Bundle, TrustDomain: f.Domain})
	}
	return nil, errors.New("an identity is required: --spiffe-socket, or --svid-cert, --svid-key, --bundle and --trust-domain")
}
